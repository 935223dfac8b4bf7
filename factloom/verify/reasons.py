"""Why a fact went to review, as one of a few reasons a reviewer can sort, group and decide by.

The fused probability says how doubtful a fact is; the reason says which check doubted it. The first
rule that matches names it, the graph's own rules before the learned scores:

- ``value_clash``: a predicate that takes one value already has another (consistency, functional);
- ``self_loop``: subject and object are the same entity; ``dates``: its validity dates do not fit;
- ``type_violation``: the subject's or object's type does not fit the predicate;
- ``low_plausibility``: a KG-embedding scorer finds it unlikely;
- ``evidence_against``: its evidence text or image speaks against it;
- ``no_judge``: every verifier abstained; ``borderline``: the checks lean neither way.

In a kb whose items need two reviewers, review itself replaces the reason: ``second_opinion`` after
the first reviewer's decision, ``disagreement`` when the second one differs (an admin decides).
The blind audit sets ``audit`` on an automatic verdict an auditor found wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ["REVIEW_REASONS", "review_reason"]

REVIEW_REASONS: Mapping[str, str] = {
    "value_clash": "value clash", "self_loop": "self-loop", "dates": "date conflict",
    "type_violation": "type violation", "low_plausibility": "low plausibility",
    "evidence_against": "evidence against", "no_judge": "no verifier could judge", "borderline": "borderline",
    # set by review, not by a check, in kbs whose items need two reviewers
    "second_opinion": "needs a second opinion", "disagreement": "reviewers disagree",
    # set by the blind audit (factloom.platform.audit): an automatic verdict an auditor found wrong
    "audit": "audit found it wrong",
}
_CONSISTENCY_RULES = {"functional": "value_clash", "self_loop": "self_loop", "dates": "dates"}
_DOUBT = 0.5  # a verifier below this speaks against the fact


class _Result(Protocol):  # a VerifierResult, or a stored CheckResult row
    @property
    def verifier(self) -> str: ...
    @property
    def probability(self) -> float | None: ...
    @property
    def details(self) -> dict[str, Any] | None: ...


def review_reason(results: Sequence[_Result]) -> str:
    """The key in :data:`REVIEW_REASONS` of a fact's verifier results (fusion's own row ignored)."""
    results = [r for r in results if r.verifier != "fusion"]
    for r in results:
        rule = (r.details or {}).get("rule")
        if r.verifier == "consistency" and rule in _CONSISTENCY_RULES and (r.probability or 0.0) < 0.9:
            return _CONSISTENCY_RULES[rule]

    def doubting(prefix: str) -> bool:
        return any(r.verifier.startswith(prefix) and r.probability is not None and r.probability < _DOUBT
                   for r in results)

    if doubting("types"):
        return "type_violation"
    if doubting("plausibility"):
        return "low_plausibility"
    if doubting("text_evidence") or doubting("image_evidence"):
        return "evidence_against"
    if all(r.probability is None for r in results):
        return "no_judge"
    return "borderline"
