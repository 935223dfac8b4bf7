"""Bodies of the model-registry routes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from factloom.ledger import ModelVersion
from factloom.platform.ingest.schemas import KbName
from factloom.platform.types import Timestamp

__all__ = ["ModelVersionOut", "ModelPage", "LearnRequest", "LearnQueued"]


class ModelVersionOut(BaseModel):
    version: str
    kind: str
    kb: str | None
    status: str
    created_at: Timestamp
    artefact: str
    metrics: dict[str, Any]
    parent: str | None = None
    watermark: Timestamp | None = None
    gates: dict[str, Any] = {}

    @classmethod
    def of(cls, row: ModelVersion) -> ModelVersionOut:
        metrics = {k: v for k, v in (row.metrics or {}).items() if k != "kb"}
        return cls(version=row.id, kind=row.kind, kb=row.kb, status=row.status,
                   created_at=row.created_at, artefact=row.artefact, metrics=metrics, parent=row.parent,
                   watermark=row.watermark, gates=row.gates or {})


class ModelPage(BaseModel):
    items: list[ModelVersionOut]


class LearnRequest(BaseModel):
    kb: KbName
    kind: Literal["scorer", "reasoner"] = "scorer"


class LearnQueued(BaseModel):
    kb: str
    kind: str
    new: int  # facts committed (scorer) or answers marked (reasoner) since the active version learned
