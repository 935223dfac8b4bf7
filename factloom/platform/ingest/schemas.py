"""Request and response bodies of the ingest routes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from factloom.config import DEFAULT_KB
from factloom.graph.store import KB_PATTERN

__all__ = ["Evidence", "FactIn", "BatchIn", "BatchAccepted", "BatchOut", "CheckOut", "SubmissionOut", "KbName"]

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000)]
Predicate = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")
]
KbName = Annotated[str, StringConstraints(pattern=KB_PATTERN.pattern)]


class Evidence(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Annotated[str, StringConstraints(max_length=10_000)] | None = None


class FactIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subject: Name = Field(description="entity name (or id) of the subject")
    predicate: Predicate
    object: Name = Field(description="entity name (or id) of the object")
    source: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000)] | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    evidence: Evidence | None = None
    key: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = Field(
        default=None, description="idempotency key; the same key twice is one submission"
    )

    @model_validator(mode="after")
    def _interval(self) -> FactIn:
        for name in ("valid_from", "valid_to"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} needs a time zone, e.g. 2024-01-01T00:00:00Z")
        return self


class BatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kb: KbName = DEFAULT_KB
    facts: list[FactIn] = Field(min_length=1)


class BatchAccepted(BaseModel):
    batch_id: str
    count: int = Field(description="new submissions in this batch")
    duplicates: int = Field(description="facts already submitted before (same key), not stored again")


class BatchOut(BaseModel):
    batch_id: str
    kb: str
    count: int
    created_at: datetime
    status: str = Field(description="'checking' while any submission is on its way, else 'done' "
                        "(every submission committed, rejected or waiting for review)")
    counts: dict[str, int]


class CheckOut(BaseModel):
    verifier: str
    probability: float | None
    score: float | None
    explanation: str
    details: dict[str, Any] | None
    model_version: str | None


class SubmissionOut(BaseModel):
    id: str
    batch_id: str
    kb: str
    fact_id: str
    subject: str
    predicate: str
    object: str
    source: str | None
    valid_from: datetime | None
    valid_to: datetime | None
    evidence: dict[str, Any] | None
    status: str
    probability: float | None
    verdict_reason: str | None
    checks: list[CheckOut]
    created_at: datetime
    updated_at: datetime
    committed_at: datetime | None
