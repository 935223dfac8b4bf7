"""Request and response bodies of ``/v1/feedback``."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from factloom.config import DEFAULT_KB
from factloom.platform.ingest.schemas import KbName
from factloom.platform.types import Printable, Timestamp

__all__ = ["MAX_ITEMS", "MAX_TEXT", "FeedbackItem", "FeedbackIn", "FeedbackRecorded", "FeedbackOut", "FeedbackPage"]

MAX_ITEMS = 1000
MAX_TEXT = 2000

# SQLite keeps a NUL, PostgreSQL refuses it mid-transaction: Printable refuses it here, with the item's place
Text = Annotated[str, Printable(MAX_TEXT)]
Version = Annotated[str, Printable(64, one_line=True)]


class FeedbackItem(BaseModel):
    """One person's word on one answer: right, or wrong and (where known) what the right one is."""

    # the schema says what _expected_only_when_wrong checks: with correct true, expected is absent or null
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "if": {"properties": {"correct": {"const": True}}, "required": ["correct"]},
        "then": {"properties": {"expected": {"type": "null"}}},
    })

    question: Text = Field(examples=["who directed [Blade Runner]"])
    answer: Text = Field(description="the answer's name, as /v1/query returned it", examples=["Ridley Scott"])
    correct: StrictBool
    expected: Text | None = Field(default=None, description="the right answer's name, when this one is wrong")
    reasoner_version: Version | None = Field(
        default=None, description="model_versions.reasoner of the answer, when the asker kept it"
    )

    @model_validator(mode="after")
    def _expected_only_when_wrong(self) -> FeedbackItem:
        if self.correct and self.expected is not None:
            raise ValueError("'expected' is the right answer to a wrong one: leave it out when correct is true")
        return self


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kb: KbName = DEFAULT_KB
    items: list[FeedbackItem] = Field(min_length=1, max_length=MAX_ITEMS)


class FeedbackRecorded(BaseModel):
    count: int
    ids: list[int] = Field(description="the ledger ids of the items, in the order sent")


class FeedbackOut(BaseModel):
    id: int
    kb: str
    question: str
    answer: str
    correct: bool
    expected: str | None
    actor: str = Field(description="who said so: key:NAME, user:NAME or demo")
    reasoner_version: str | None
    created_at: Timestamp


class FeedbackPage(BaseModel):
    items: list[FeedbackOut] = Field(description="newest first")
    limit: int
