"""What every verifier takes and returns."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from factloom.graph.types import StoredFact

__all__ = ["Claim", "VerifierResult", "Verifier", "Verdict", "GraphView"]

# current graph facts per (subject name, predicate), as ``Neo4jStore.current_facts`` returns them
GraphView = Mapping[tuple[str, str], Sequence[StoredFact]]


@dataclass(frozen=True, slots=True)
class Claim:
    """A submitted fact under check."""

    submission_id: str
    fact_id: str
    subject: str
    predicate: str
    object: str
    source: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    evidence_text: str | None = None
    image_path: str | None = None  # the stored evidence image, when one was uploaded with the fact


@dataclass(frozen=True, slots=True)
class VerifierResult:
    """``probability`` that the claim is true, or ``None`` when the verifier abstains."""

    verifier: str
    probability: float | None
    explanation: str
    score: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    model_version: str | None = None


class Verifier(Protocol):
    name: str

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        """One result per claim, in order. ``graph`` holds the current facts the claims touch."""
        ...


class Verdict(str, enum.Enum):
    accept = "accept"
    reject = "reject"
    review = "review"
