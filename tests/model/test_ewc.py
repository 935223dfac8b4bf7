"""EWC by hand on a 2-weight model, online consolidation, growing tables, and the scorer learning in steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from factloom.model.ewc import ElasticWeights, empirical_fisher, grow_embedding
from factloom.model.scorer import ComplExScorer

Triple = tuple[str, str, str]


def _penalty(ewc: ElasticWeights, model: torch.nn.Module) -> float:
    with torch.no_grad():
        return float(ewc.penalty(model))


def _linear() -> torch.nn.Linear:
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
    return model


def test_fisher_and_penalty_by_hand(tmp_path: Path) -> None:
    # loss (w·x − y)², gradient 2(w·x − y)x: batch x=(1,0), y=0 → (2, 0); x=(0,1), y=0 → (0, 4)
    model = _linear()
    batches = [(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0]])), (torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0]]))]
    fisher = empirical_fisher(model, batches, lambda b: ((model(b[0]) - b[1]) ** 2).sum())
    # squared gradients (4, 0) and (0, 16), mean (2, 8), divided by the largest entry: (0.25, 1)
    assert list(fisher) == ["weight"]
    torch.testing.assert_close(fisher["weight"], torch.tensor([[0.25, 1.0]]))
    assert model.weight.grad is None  # .grad untouched
    ewc = ElasticWeights.from_model(model, fisher, lam=10.0)
    assert _penalty(ewc, model) == 0.0
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[3.0, 0.0]]))  # moved by (2, −2)
    # 10/2 · (0.25·4 + 1·4) = 25
    assert _penalty(ewc, model) == pytest.approx(25.0)
    ewc.save(tmp_path / "ewc.pt")
    again = ElasticWeights.load(tmp_path / "ewc.pt")
    assert _penalty(again, model) == pytest.approx(25.0) and again.lam == 10.0
    assert "lam=10.0" in repr(again)


def test_online_consolidation_pads_grown_rows() -> None:
    table = torch.nn.Embedding(2, 2)
    old = {"weight": torch.tensor([[1.0, 0.5], [0.0, 0.25]])}
    ewc = ElasticWeights.from_model(table, old, lam=3.0)
    grown = grow_embedding(table, 1)
    new = {"weight": torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.5, 1.0]])}
    merged = ewc.consolidate(grown, new, gamma=0.5)
    torch.testing.assert_close(merged.fisher["weight"], torch.tensor([[1.0, 0.75], [1.0, 0.125], [0.5, 1.0]]))
    assert torch.equal(merged.anchor["weight"], grown.weight.detach()) and merged.lam == 3.0
    assert ewc.fisher["weight"].shape == (2, 2)  # the parent is unchanged


def test_grow_keeps_old_rows_and_penalty_ignores_new_ones() -> None:
    torch.manual_seed(0)
    table = torch.nn.Embedding(5, 4)
    grown = grow_embedding(table, 3)
    assert grown.weight.shape == (8, 4) and torch.equal(grown.weight[:5], table.weight)
    assert 0 < float(grown.weight.detach()[5:].abs().max()) < 1e-2
    ewc = ElasticWeights.from_model(table, {"weight": torch.ones(5, 4)})
    with torch.no_grad():
        grown.weight[5:] += 1.0
    assert _penalty(ewc, grown) == 0.0
    with torch.no_grad():
        grown.weight[0, 0] += 1.0
    assert _penalty(ewc, grown) == pytest.approx(5.0)


def test_add_gradient_is_the_penalty_s_gradient_and_leaves_grown_rows_alone() -> None:
    torch.manual_seed(0)
    table = torch.nn.Embedding(5, 4)
    ewc = ElasticWeights.from_model(table, {"weight": torch.rand(5, 4)}, lam=3.0)
    grown = grow_embedding(table, 2)
    with torch.no_grad():
        grown.weight.add_(torch.randn(7, 4))
    ewc.penalty(grown).backward()
    by_autograd = grown.weight.grad.clone()
    grown.weight.grad = torch.full((7, 4), 0.5)  # what the loss put there: added to, not replaced
    ewc.add_gradient_(grown)
    torch.testing.assert_close(grown.weight.grad, by_autograd + 0.5)
    assert torch.equal(by_autograd[5:], torch.zeros(2, 4))  # new rows: free
    fresh = grow_embedding(table, 2)
    ewc.add_gradient_(fresh)  # no .grad yet: made
    assert fresh.weight.grad is not None and torch.equal(fresh.weight.grad, torch.zeros(7, 4))


def test_scorer_extend_keeps_old_rows_and_reciprocals() -> None:
    old_facts = [("a", "r1", "b"), ("b", "r2", "c"), ("c", "r1", "a")]
    scorer = ComplExScorer.from_triples(old_facts, rank=4)
    scorer.fit(old_facts, epochs=5, batch_size=4, progress=False)
    ent, rel = scorer.model.ent.weight.detach().clone(), scorer.model.rel.weight.detach().clone()
    raw = scorer.raw_scores(old_facts)
    ewc = ElasticWeights.from_model(scorer.model, scorer.fisher(old_facts))
    assert scorer.extend(["a", "d", "e", "d"], ["r1", "r3"]) == (2, 1)
    assert scorer.entities == {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4} and scorer.relations["r3"] == 2
    assert torch.equal(scorer.model.ent.weight[:3], ent)
    w = scorer.model.rel.weight  # [r1, r2, r3, r1⁻¹, r2⁻¹, r3⁻¹]
    assert w.shape == (6, 8) and torch.equal(w[:2], rel[:2]) and torch.equal(w[3:5], rel[2:4])
    assert scorer.raw_scores(old_facts) == raw  # reciprocals found at r + n_rel
    aligned = scorer.align(ewc)
    assert _penalty(aligned, scorer.model) == 0.0
    with torch.no_grad():
        scorer.model.ent.weight[3:] += 1.0  # new entities
        scorer.model.rel.weight[[2, 5]] += 1.0  # r3, r3⁻¹
    assert _penalty(aligned, scorer.model) == 0.0
    with torch.no_grad():
        scorer.model.rel.weight[4] += 1.0  # r2⁻¹, moved from row 3
    assert _penalty(aligned, scorer.model) > 0.0
    assert _penalty(ewc.consolidate(scorer.model, scorer.fisher(old_facts)), scorer.model) == 0.0


def _cities(people: range, rel: str, shift: int) -> list[Triple]:
    return [(f"p{i}", rel, f"c{(i + shift) % 4}") for i in people]


def _tail_mrr(scorer: ComplExScorer, facts: list[Triple]) -> float:
    cities = [f"c{k}" for k in range(4)]
    total = 0.0
    for s, p, o in facts:
        raw = scorer.raw_scores([(s, p, c) for c in cities])
        own = raw[cities.index(o)]
        total += 1.0 / (1 + sum(r is not None and own is not None and r > own for r in raw))
    return total / len(facts)


def test_ewc_remembers_the_first_snapshot() -> None:
    torch.set_num_threads(1)
    part_a = _cities(range(12), "lives_in", 0)
    # part B: the same people, a relation that puts each one in the *next* city: plain fine-tuning
    # pulls the people's embeddings towards B's answer and A's ranking degrades
    part_b = _cities(range(12), "works_in", 1) + _cities(range(12, 20), "lives_in", 0)
    runs = {}
    for arm in ("finetune", "ewc"):
        scorer = ComplExScorer.from_triples(part_a, rank=8)
        scorer.fit(part_a, epochs=150, batch_size=32, lr=0.5, reg=1e-3, progress=False)
        before = _tail_mrr(scorer, part_a)
        ewc = ElasticWeights.from_model(scorer.model, scorer.fisher(part_a), lam=1000.0)
        scorer.extend([x for s, _, o in part_b for x in (s, o)], [p for _, p, _ in part_b])
        scorer.fit(part_b, epochs=150, batch_size=32, lr=0.5, reg=1e-3, progress=False, keep_known=True,
                   ewc=ewc if arm == "ewc" else None)
        runs[arm] = (before, _tail_mrr(scorer, part_a), _tail_mrr(scorer, part_b), _penalty(ewc, scorer.model))
        assert len(scorer.known) == len(part_a) + len(part_b)  # the union
    assert runs["ewc"][0] == runs["finetune"][0] == 1.0  # the same start
    assert runs["ewc"][3] < 0.5 * runs["finetune"][3]  # held nearer the anchor
    assert runs["ewc"][1] >= runs["finetune"][1]
    assert runs["ewc"][2] > 0.9  # and B is still learned
