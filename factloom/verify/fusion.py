"""From verifier results to one probability and a three-way verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from factloom.verify.base import Verdict, VerifierResult

__all__ = ["VerdictRule", "Fused"]


@dataclass(frozen=True, slots=True)
class Fused:
    probability: float | None
    verdict: Verdict
    reason: str


@dataclass(frozen=True, slots=True)
class VerdictRule:
    """The most doubtful verifier decides; thresholds split the probability three ways.

    Taking the minimum is the conservative fusion for verifiers that each can veto a fact; a learned,
    calibrated fusion replaces it when several probabilistic verifiers run. When every verifier
    abstains the fact goes to review: nothing unchecked reaches the graph.

    Args:
        accept: auto-accept at or above this probability.
        reject: auto-reject at or below this probability.
    """

    accept: float = 0.9
    reject: float = 0.1
    name: str = "fusion"
    version: str = "min-rule-1"

    def __post_init__(self) -> None:
        if not 0.0 <= self.reject < self.accept <= 1.0:
            raise ValueError(f"need 0 <= reject < accept <= 1, got {self.reject}, {self.accept}")

    def fuse(self, results: Sequence[VerifierResult]) -> Fused:
        voting = [r for r in results if r.probability is not None]
        if not voting:
            return Fused(None, Verdict.review, "every verifier abstained")
        worst = min(voting, key=lambda r: r.probability or 0.0)
        p = float(worst.probability or 0.0)
        if p >= self.accept:
            verdict = Verdict.accept
        elif p <= self.reject:
            verdict = Verdict.reject
        else:
            verdict = Verdict.review
        return Fused(p, verdict, f"{worst.verifier}: {worst.explanation}")
