"""Plausibility verifier over a ComplEx scorer trained on a toy graph: ranks, batching, abstentions."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from factloom.model.scorer import FEATURE_NAMES, ComplExScorer
from factloom.verify.base import Claim
from factloom.verify.plausibility import TYPE_FEATURES, PlausibilityVerifier

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _claim(i: int, s: str, p: str, o: str) -> Claim:
    return Claim(submission_id="s1", fact_id=f"f{i}", subject=s, predicate=p, object=o)


def _scorer() -> tuple[ComplExScorer, list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    people = [f"p{i}" for i in range(16)]
    cities = [f"c{i}" for i in range(4)]
    true = [(p, "lives_in", cities[i % 4]) for i, p in enumerate(people)]
    true += [(p, "works_in", cities[i % 4]) for i, p in enumerate(people)]
    false = [(p, "lives_in", cities[(i + 2) % 4]) for i, p in enumerate(people)]
    train = [t for t in true if t[0] not in ("p0", "p1", "p2", "p3") or t[1] == "works_in"]
    scorer = ComplExScorer.from_triples(true, rank=8)
    scorer.fit(train, epochs=200, batch_size=64, lr=0.5, reg=1e-3, progress=False)
    return scorer, true, false


def test_true_facts_score_higher_with_ranks_and_unseen_names_abstain(tmp_path: Path) -> None:
    scorer, true, false = _scorer()
    path = tmp_path / "scorer.pt"
    scorer.save(path)
    verifier = PlausibilityVerifier.load(path)
    # held-out lives_in facts of p0..p3 (their works_in facts are known) against wrong cities
    held_true = [t for t in true if t[0] in ("p0", "p1", "p2", "p3") and t[1] == "lives_in"]
    held_false = [t for t in false if t[0] in ("p0", "p1", "p2", "p3")]
    claims = [_claim(i, *t) for i, t in enumerate(held_true + held_false)]
    claims += [_claim(90, "stranger", "lives_in", "c0"), _claim(91, "p0", "born_in", "c9")]
    results = verifier.check(claims, {}, NOW)
    assert [r.verifier for r in results] == ["plausibility"] * len(claims)
    n = len(held_true)
    for good, bad in zip(results[:n], results[n:2 * n], strict=True):
        assert good.probability is not None and bad.probability is not None
        assert good.score is not None and bad.score is not None and good.score > bad.score
        assert good.details["log_tail_rank"] <= bad.details["log_tail_rank"]
        assert set(good.details) == set(FEATURE_NAMES)
        assert "object ranks" in good.explanation and good.model_version == scorer.version
    assert results[-2].probability is None and "subject 'stranger'" in results[-2].explanation
    assert results[-1].probability is None
    assert "relation 'born_in'" in results[-1].explanation and "object 'c9'" in results[-1].explanation
    assert verifier.check([], {}, NOW) == []


def test_filtered_rank_ignores_other_known_answers() -> None:
    scorer, true, _ = _scorer()
    # p5 works_in c1 is a training fact; asking for another known-true tail must not be pushed down by it
    feats = scorer.features([("p5", "works_in", "c1"), ("p5", "lives_in", "c1")])
    assert all(f is not None and f["log_tail_rank"] == 0.0 for f in feats)  # rank 1: best remaining answer
    assert feats[0] is not None and feats[0]["log_head_degree"] > 0
    assert scorer.features([("nobody", "works_in", "c1")]) == [None]


def test_type_support_reads_the_training_facts() -> None:
    scorer, _, _ = _scorer()
    types = {**{f"p{i}": ["person"] for i in range(16)}, **{f"c{i}": ["city"] for i in range(4)}, "c3": ["country"]}
    verifier = PlausibilityVerifier(scorer, name="kge", entity_types=types)
    assert verifier.feature_names[-2:] == list(TYPE_FEATURES)
    ok, odd, swapped = verifier.check([_claim(0, "p5", "lives_in", "c1"), _claim(1, "p5", "lives_in", "c3"),
                                       _claim(2, "c1", "lives_in", "p5")], {}, NOW)
    assert ok.verifier == "kge" and ok.details["tail_type_support"] == 0.75  # 9 of 12 lives_in objects: city
    assert odd.details["tail_type_support"] == 0.25 and ok.details["head_type_support"] == 1.0
    assert swapped.details["head_type_support"] == 0.0 and swapped.details["tail_type_support"] == 0.0
