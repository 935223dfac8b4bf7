"""Bodies of the model-registry routes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from factloom.ledger import ModelVersion
from factloom.platform.ingest.schemas import KbName
from factloom.platform.types import Timestamp

__all__ = ["ModelVersionOut", "ModelPage", "LearnRequest", "LearnQueued", "AbRequest", "RollbackRequest",
           "RolledBack", "FiguresOut", "VersionFigures"]


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
    traffic_share: float = Field(0.0, description="the share of the kb's questions it answers (1 when active, "
                                                  "the A/B share on an ab trial)")

    @classmethod
    def of(cls, row: ModelVersion) -> ModelVersionOut:
        metrics = {k: v for k, v in (row.metrics or {}).items() if k != "kb"}
        return cls(version=row.id, kind=row.kind, kb=row.kb, status=row.status,
                   created_at=row.created_at, artefact=row.artefact, metrics=metrics, parent=row.parent,
                   watermark=row.watermark, gates=row.gates or {}, traffic_share=row.traffic_share or 0.0)


class ModelPage(BaseModel):
    items: list[ModelVersionOut]


class LearnRequest(BaseModel):
    kb: KbName
    kind: Literal["scorer", "reasoner"] = "scorer"


class LearnQueued(BaseModel):
    kb: str
    kind: str
    new: int  # facts committed (scorer) or answers marked (reasoner) since the active version learned


class AbRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    share: float = Field(gt=0.0, lt=1.0, description="the share of the kb's questions (by API key) it answers",
                         examples=[0.1])


class RollbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kb: KbName
    kind: Literal["router", "reasoner", "scorer", "fusion"]


class RolledBack(BaseModel):
    kb: str
    kind: str
    rolled_back: str = Field(description="the version taken off")
    active: str = Field(description="the version that serves again")


class FiguresOut(BaseModel):
    """What a version answered in one role, summed over every API process."""

    questions: int
    errors: int
    error_rate: float
    p95_ms: float | None = Field(description="the upper edge of the latency bucket holding the 95th percentile")
    compared: int = Field(description="shadow answers compared with the active version's")
    agreement: float | None = Field(description="the share of compared shadow answers whose top answer agreed")


class VersionFigures(BaseModel):
    version: str
    status: str
    roles: dict[str, FiguresOut]
