"""Consistency with the graph: duplicates, functional predicates, dates."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from factloom.graph.types import StoredFact, entity_key
from factloom.verify.base import Claim, GraphView, VerifierResult

__all__ = ["ConsistencyVerifier"]


class ConsistencyVerifier:
    """Checks each claim against the current graph and against the claims before it in the chunk.

    * a claim whose validity interval ends before it starts is false;
    * a claim that repeats a current fact is true (its source corroborates the fact);
    * a second, different current value of a functional predicate is a contradiction, left to a
      reviewer, who decides which value holds (the accepted one supersedes the other);
    * a claim valid only from the future, or linking an entity to itself, is doubtful.

    Args:
        functional: predicates that admit one current value per subject.
        future_slack: how far ahead of now a ``valid_from`` may lie before it is doubtful.
    """

    name = "consistency"
    version = "consistency-1"

    def __init__(self, functional: Iterable[str] = (), future_slack: timedelta = timedelta(days=1)) -> None:
        self.functional = frozenset(functional)
        self.future_slack = future_slack

    def __repr__(self) -> str:
        return f"{type(self).__name__}(functional={sorted(self.functional)})"

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        # claims earlier in the chunk count as facts for the ones after them, so one chunk cannot
        # slip two values of a functional predicate past the check
        seen: dict[tuple[str, str], list[StoredFact]] = {}
        results = []
        for claim in claims:
            pair = (entity_key(claim.subject), claim.predicate)
            current = [*graph.get((claim.subject, claim.predicate), ()), *seen.get(pair, ())]
            result = self._check_one(claim, current, now)
            results.append(result)
            if result.probability is not None and result.probability >= 0.5:
                seen.setdefault(pair, []).append(_as_fact(claim))
        return results

    def _check_one(self, claim: Claim, current: Sequence[StoredFact], now: datetime) -> VerifierResult:
        if claim.valid_from and claim.valid_to and claim.valid_to < claim.valid_from:
            return self._result(0.02, "valid_to precedes valid_from", rule="dates")
        same = [f for f in current if entity_key(f.object) == entity_key(claim.object)]
        if same:
            fact = same[0]
            sources = ", ".join(fact.sources) or "no source"
            return self._result(
                0.99, f"repeats a fact already in the graph ({sources})",
                rule="duplicate", fact_ids=[fact.fact_id],
            )
        if claim.predicate in self.functional:
            others = [f for f in current if entity_key(f.object) != entity_key(claim.object)]
            if others:
                values = ", ".join(sorted({f.object for f in others}))
                return self._result(
                    0.5,
                    f"contradicts the graph: '{claim.predicate}' takes one value and "
                    f"'{claim.subject}' already has {values}",
                    rule="functional", fact_ids=[f.fact_id for f in others],
                )
        if claim.valid_from and claim.valid_from > now + self.future_slack:
            return self._result(0.5, "valid_from lies in the future", rule="dates")
        if entity_key(claim.subject) == entity_key(claim.object):
            return self._result(0.5, "subject and object are the same entity", rule="self_loop")
        return self._result(0.95, "consistent with the graph", rule="ok")

    def _result(self, probability: float, explanation: str, **details: object) -> VerifierResult:
        return VerifierResult(
            verifier=self.name, probability=probability, score=probability,
            explanation=explanation, details=dict(details), model_version=self.version,
        )


def _as_fact(claim: Claim) -> StoredFact:
    return StoredFact(
        fact_id=claim.fact_id, subject=claim.subject, predicate=claim.predicate, object=claim.object,
        sources=[claim.source] if claim.source else [], confidence=1.0,
        valid_from=claim.valid_from, valid_to=claim.valid_to,
    )
