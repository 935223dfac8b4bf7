"""Request and response bodies of the ingest routes."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from factloom.config import DEFAULT_KB
from factloom.graph.store import KB_PATTERN
from factloom.platform.types import NO_NUL, Instant, Name, Printable, Timestamp

__all__ = [
    "Evidence", "ImageIn", "FusionOut", "FactIn", "BatchIn", "BatchAccepted", "BatchOut", "CheckOut",
    "SubmissionOut", "KbName",
]

Predicate = Annotated[str, Printable(200, one_line=True)]
KbName = Annotated[str, StringConstraints(pattern=KB_PATTERN.pattern)]


_URL = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.-]*://|^\s*data:", re.IGNORECASE)
NO_URLS = ("the platform never fetches URLs: upload the image itself as "
           "evidence.image = {\"content_type\": \"image/png\", \"data\": BASE64}")


class ImageIn(BaseModel):
    """An image uploaded with the fact, as base64; its bytes are checked against ``content_type``."""

    model_config = ConfigDict(extra="forbid")
    content_type: Literal["image/png", "image/jpeg", "image/webp"]
    # the size limit in bytes is enforced after decoding (Settings.max_image_bytes)
    data: Annotated[str, StringConstraints(min_length=1)]

    @model_validator(mode="before")
    @classmethod
    def _no_urls(cls, value: Any) -> Any:
        if isinstance(value, dict) and any(k in value for k in ("url", "image_url", "href", "src")):
            raise ValueError(NO_URLS)
        if isinstance(value, dict) and isinstance(value.get("data"), str) and _URL.match(value["data"]):
            raise ValueError(NO_URLS)
        return value


class Evidence(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Annotated[str, StringConstraints(max_length=10_000, pattern=NO_NUL)] | None = None
    image: ImageIn | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_urls(cls, value: Any) -> Any:
        if isinstance(value, dict):
            if any(k in value for k in ("image_url", "url", "image_uri")):
                raise ValueError(NO_URLS)
            if isinstance(value.get("image"), str):
                raise ValueError(NO_URLS if _URL.match(value["image"]) else
                                 "evidence.image is an object {content_type, data (base64)}")
        return value


class FactIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subject: Name = Field(description="entity name (or id) of the subject")
    predicate: Predicate
    object: Name = Field(description="entity name (or id) of the object")
    source: Name | None = None
    valid_from: Instant | None = None
    valid_to: Instant | None = None
    evidence: Evidence | None = None
    key: Annotated[str, Printable(200, one_line=True)] | None = Field(
        default=None, description="idempotency key; the same key twice is one submission"
    )


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
    created_at: Timestamp
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


class FusionOut(BaseModel):
    """The fused verdict: its probability, the thresholds it was cut at and the models behind it."""

    probability: float | None
    verdict: str | None
    method: str | None = Field(description="'fusion' (the min rule) or the learned fusion's name")
    accept: float | None = Field(description="auto-accept at or above this probability")
    reject: float | None = Field(description="auto-reject at or below this probability")
    certificate: dict[str, Any] | None = Field(default=None, description="how the accept threshold was certified")
    versions: dict[str, Any] = Field(default_factory=dict, description="fusion, scorer and verifier versions")
    abstained: list[str] = Field(default_factory=list)


class SubmissionOut(BaseModel):
    id: str
    batch_id: str
    kb: str
    fact_id: str
    subject: str
    predicate: str
    object: str
    source: str | None
    valid_from: Timestamp | None
    valid_to: Timestamp | None
    evidence: dict[str, Any] | None
    status: str
    probability: float | None
    verdict_reason: str | None
    checks: list[CheckOut]
    fusion: FusionOut | None = None
    created_at: Timestamp
    updated_at: Timestamp
    committed_at: Timestamp | None
