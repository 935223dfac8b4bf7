"""Request and response bodies of ``/v1/keys``. A key's secret appears once, in the answer that
creates it (:class:`KeyCreated`); its hash never leaves the ledger."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from factloom.graph.store import KB_PATTERN
from factloom.platform.auth.service import MAX_KEY_DAYS
from factloom.platform.types import Instant, Timestamp

__all__ = ["KeyIn", "RotateIn", "KeyOut", "KeyCreated", "KeyPage"]

KbName = Annotated[str, StringConstraints(pattern=KB_PATTERN.pattern)]


class KeyIn(BaseModel):
    # the schema says what the validator below does: not both expiries at once
    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": {
        "required": ["expires_in_days", "expires_at"],
        "properties": {"expires_in_days": {"type": "number"}, "expires_at": {"type": "string"}}}})

    name: str = Field(min_length=1, max_length=200)
    scopes: list[str] = Field(min_length=1)
    kbs: Annotated[list[KbName] | None, Field(min_length=1, max_length=100,
                                              description="the kbs the key may read and write; null: all")] = None
    expires_in_days: Annotated[float | None, Field(gt=0, le=MAX_KEY_DAYS)] = None
    expires_at: Instant | None = None

    @model_validator(mode="after")
    def _one_expiry(self) -> KeyIn:
        if self.expires_in_days is not None and self.expires_at is not None:
            raise ValueError("give expires_in_days or expires_at, not both")
        return self


class RotateIn(BaseModel):
    """A new expiry for the rotated key; without one it keeps the old key's."""

    model_config = ConfigDict(extra="forbid")

    expires_in_days: Annotated[float | None, Field(gt=0, le=MAX_KEY_DAYS)] = None


class KeyOut(BaseModel):
    id: str
    name: str
    prefix: str = Field(description="the key's public part, fl_<prefix>_…; not a secret")
    scopes: list[str]
    kbs: list[str] | None = Field(description="the kbs the key may read and write; null: all")
    created_at: Timestamp
    expires_at: Timestamp | None
    revoked_at: Timestamp | None


class KeyCreated(KeyOut):
    key: str = Field(description="shown once; only its hash is stored")


class KeyPage(BaseModel):
    items: list[KeyOut]
