"""ComplEx scorer on a toy graph: learns it in seconds, abstains on unseen names, survives save/load."""

from __future__ import annotations

from pathlib import Path

from factloom.model.scorer import ComplExScorer


def _toy() -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    people = [f"p{i}" for i in range(12)]
    cities = [f"c{i}" for i in range(4)]
    true = [(p, "lives_in", cities[i % 4]) for i, p in enumerate(people)]
    false = [(p, "lives_in", cities[(i + 1) % 4]) for i, p in enumerate(people)]
    return true, false


def test_learns_toy_graph_and_abstains(tmp_path: Path) -> None:
    true, false = _toy()
    scorer = ComplExScorer.from_triples(true, rank=8)
    losses = scorer.fit(true, epochs=200, batch_size=64, lr=0.5, reg=1e-3, progress=False)
    assert losses[-1] < losses[0]
    t_raw = scorer.raw_scores(true)
    f_raw = scorer.raw_scores(false)
    assert sum(a is not None and b is not None and a > b for a, b in zip(t_raw, f_raw, strict=True)) >= 11
    scorer.calibrate(true + false, [1] * len(true) + [0] * len(false), min_per_relation=10)
    probs = scorer.score(true + [("nobody", "lives_in", "c0"), ("p0", "unknown_rel", "c0")])
    assert probs[-2] is None and probs[-1] is None
    assert all(p is not None and 0.0 <= p <= 1.0 for p in probs[:-2])
    scorer.save(tmp_path / "s.pt")
    again = ComplExScorer.load(tmp_path / "s.pt")
    assert again.score(true[:3]) == scorer.score(true[:3])


def test_sampled_softmax_learns_and_features_survive_save_load(tmp_path: Path) -> None:
    true, false = _toy()
    scorer = ComplExScorer.from_triples(true, rank=8)
    losses = scorer.fit(true, epochs=200, batch_size=64, lr=0.5, reg=1e-3, progress=False, negatives=6)
    assert losses[-1] < losses[0] and scorer.hparams["negatives"] == 6
    t_raw, f_raw = scorer.raw_scores(true), scorer.raw_scores(false)
    assert sum(a is not None and b is not None and a > b for a, b in zip(t_raw, f_raw, strict=True)) >= 10
    assert scorer.unseen(("p0", "lives_in", "c0")) is None
    assert scorer.unseen(("p0", "flies_to", "mars")) == "unseen by the scorer: relation 'flies_to', object 'mars'"
    scorer.save(tmp_path / "s.pt")
    again = ComplExScorer.load(tmp_path / "s.pt")
    assert again.version == scorer.version and again.features(false[:3]) == scorer.features(false[:3])
