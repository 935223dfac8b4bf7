"""Bodies of the review routes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from factloom.platform.ingest.schemas import SubmissionOut

__all__ = ["ReviewPage", "DecisionIn", "DecisionOut"]


class ReviewPage(BaseModel):
    items: list[SubmissionOut]
    total: int
    limit: int
    offset: int


class DecisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decision: Literal["accept", "keep_both", "reject"]  # the values of factloom.ledger.tables.Decision
    reason: str = Field(default="", max_length=2000)


class DecisionOut(BaseModel):
    id: str
    status: str
    decision: str
