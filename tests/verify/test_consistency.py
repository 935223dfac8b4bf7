"""The consistency verifier and the verdict rule on hand-made cases."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from factloom.graph.types import StoredFact
from factloom.verify import Claim, ConsistencyVerifier, Verdict, VerdictRule, VerifierResult

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def claim(subject: str, predicate: str, obj: str, n: int = 0, **kw: object) -> Claim:
    return Claim(submission_id=f"s{n}", fact_id=f"f{n}", subject=subject, predicate=predicate, object=obj, **kw)  # type: ignore[arg-type]


def stored(subject: str, predicate: str, obj: str, fact_id: str = "g1") -> StoredFact:
    return StoredFact(fact_id=fact_id, subject=subject, predicate=predicate, object=obj,
                      sources=["wiki"], confidence=1.0, valid_from=None, valid_to=None)


verifier = ConsistencyVerifier(functional=["release_year"])
rule = VerdictRule(accept=0.9, reject=0.1)


def verdict(c: Claim, graph: dict[tuple[str, str], list[StoredFact]] | None = None) -> tuple[Verdict, VerifierResult]:
    result = verifier.check([c], graph or {}, NOW)[0]
    return rule.fuse([result]).verdict, result


def test_new_consistent_fact_is_accepted() -> None:
    v, result = verdict(claim("Blade Runner", "directed_by", "Ridley Scott"))
    assert v is Verdict.accept and result.details["rule"] == "ok"


def test_second_value_of_functional_predicate_goes_to_review() -> None:
    graph = {("Blade Runner", "release_year"): [stored("Blade Runner", "release_year", "1982")]}
    v, result = verdict(claim("Blade Runner", "release_year", "1999"), graph)
    assert v is Verdict.review
    assert "1982" in result.explanation and result.details["fact_ids"] == ["g1"]


def test_second_value_of_non_functional_predicate_is_fine() -> None:
    graph = {("Blade Runner", "starred_actors"): [stored("Blade Runner", "starred_actors", "Harrison Ford")]}
    v, _ = verdict(claim("Blade Runner", "starred_actors", "Rutger Hauer"), graph)
    assert v is Verdict.accept


def test_duplicate_is_accepted_as_corroboration_whatever_the_case() -> None:
    graph = {("blade runner", "release_year"): [stored("Blade Runner", "release_year", "1982")]}
    v, result = verdict(claim("blade runner", "release_year", " 1982"), graph)
    assert v is Verdict.accept and result.details["rule"] == "duplicate"


def test_inverted_interval_is_rejected() -> None:
    v, _ = verdict(claim("A", "p", "B", valid_from=NOW, valid_to=NOW - timedelta(days=3)))
    assert v is Verdict.reject


def test_future_validity_and_self_loop_are_doubtful() -> None:
    assert verdict(claim("A", "p", "B", valid_from=NOW + timedelta(days=30)))[0] is Verdict.review
    assert verdict(claim("A", "p", "a"))[0] is Verdict.review


def test_contradiction_inside_one_chunk_is_caught() -> None:
    claims = [claim("Alien", "release_year", "1979", 1), claim("Alien", "release_year", "1986", 2)]
    first, second = verifier.check(claims, {}, NOW)
    assert rule.fuse([first]).verdict is Verdict.accept
    assert rule.fuse([second]).verdict is Verdict.review


def test_rule_takes_the_most_doubtful_and_reviews_abstentions() -> None:
    sure = VerifierResult("a", 0.99, "fine")
    doubtful = VerifierResult("b", 0.4, "hmm")
    fused = rule.fuse([sure, doubtful])
    assert fused.verdict is Verdict.review and fused.probability == 0.4 and fused.reason.startswith("b:")
    assert rule.fuse([VerifierResult("a", None, "abstain")]).verdict is Verdict.review
    with pytest.raises(ValueError):
        VerdictRule(accept=0.1, reject=0.9)


def test_review_reasons_name_the_check_that_doubted() -> None:
    from factloom.verify.reasons import REVIEW_REASONS, review_reason

    def r(verifier: str, p: float | None, **details: object) -> VerifierResult:
        return VerifierResult(verifier, p, "", details=dict(details))

    corroborated = r("corroboration", 0.99)
    assert review_reason([r("consistency", 0.5, rule="functional"), corroborated, r("types", 0.1)]) == "value_clash"
    assert review_reason([r("consistency", 0.5, rule="self_loop"), corroborated]) == "self_loop"
    assert review_reason([r("consistency", 0.95, rule="ok"), r("types", 0.2, rule="types")]) == "type_violation"
    assert review_reason([r("consistency", 0.95, rule="ok"), r("plausibility_0", 0.3)]) == "low_plausibility"
    assert review_reason([r("text_evidence", 0.1), r("plausibility", 0.7)]) == "evidence_against"
    assert review_reason([r("types", None), r("plausibility", None), r("fusion", 0.5)]) == "no_judge"
    assert review_reason([r("consistency", 0.95, rule="ok"), r("plausibility", 0.6)]) == "borderline"
    assert set(REVIEW_REASONS) >= {"value_clash", "self_loop", "type_violation", "low_plausibility", "no_judge"}


def test_one_vocabulary_of_review_decisions() -> None:
    from typing import get_args

    from factloom.ledger.tables import DECISIONS_THAT_HOLD, Decision
    from factloom.platform.cli import build_parser
    from factloom.platform.review.schemas import DecisionIn
    from factloom.platform.review.service import DECISIONS

    values = [d.value for d in Decision]
    assert list(DECISIONS) == values and set(DECISIONS_THAT_HOLD) == {"accept", "keep_both"}
    assert list(get_args(DecisionIn.model_fields["decision"].annotation)) == values
    decide = build_parser()._subparsers._group_actions[0].choices["review"]  # type: ignore[union-attr]
    choices = decide._subparsers._group_actions[0].choices["decide"]._actions  # type: ignore[union-attr]
    assert next(a.choices for a in choices if a.dest == "decision") == values
