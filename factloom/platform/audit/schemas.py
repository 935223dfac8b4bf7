"""Bodies of ``/v1/audit``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from factloom.ledger import AuditEvent
from factloom.platform.types import Timestamp

__all__ = ["AuditEventOut", "AuditPage"]


class AuditEventOut(BaseModel):
    id: int
    at: Timestamp
    actor: str = Field(description="key:NAME#ID, user:NAME, learner or system")
    action: str = Field(description="e.g. ingest.batch, review.accept, model.promote, key.revoke, user.create")
    target: str
    details: dict[str, Any] | None

    @classmethod
    def of(cls, row: AuditEvent) -> AuditEventOut:
        return cls(id=row.id, at=row.created_at, actor=row.actor, action=row.action, target=row.target,
                   details=row.details)


class AuditPage(BaseModel):
    items: list[AuditEventOut]
    next_before: int | None = Field(description="pass as ?before= for the next (older) page; null at the end")
