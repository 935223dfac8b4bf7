"""Router and reasoner layers: shapes, and a tiny hand-made graph learned in a few steps."""

from __future__ import annotations

import pytest
import torch

from factloom.graph.types import Edge, Seed, Subgraph
from factloom.model.embedder import Embedder
from factloom.model.features import SEGMENTS, RelationFeatures, collate, make_sample, question_features
from factloom.model.flow import RelationFlowConv
from factloom.model.pipeline import LearnedPipeline, load_model, save_model
from factloom.model.precision import PrecisionPolicy
from factloom.model.reasoner import PathReasoner, ReasonerConfig
from factloom.model.router import RelationRouter, RouterConfig
from factloom.model.train._common import fit

FACTS = [
    ("anna", "spouse", "bob"), ("bob", "parents", "carl"), ("carl", "place_of_birth", "dover"),
    ("bob", "place_of_birth", "york"), ("anna", "place_of_birth", "leeds"), ("anna", "children", "dan"),
    ("dan", "place_of_birth", "hull"), ("carl", "spouse", "eve"), ("eve", "place_of_birth", "bath"),
    ("fay", "spouse", "gus"), ("gus", "parents", "hal"), ("hal", "place_of_birth", "ely"),
    ("gus", "place_of_birth", "wells"), ("fay", "children", "ian"), ("ian", "place_of_birth", "ripon"),
]
IDS = {n: f"e-{n}" for n in dict.fromkeys(x for s, _, o in FACTS for x in (s, o))}
EDGES = [Edge(f"f{i}", IDS[s], IDS[o], p) for i, (s, p, o) in enumerate(FACTS)]
QUESTIONS = [  # (question, seed, answer)
    ("where was the spouse of {} born", "anna", "york"),
    ("where was the spouse of {} born", "fay", "wells"),
    ("what is the birthplace of {} 's husband 's father", "anna", "dover"),
    ("what is the birthplace of {} 's husband 's father", "fay", "ely"),
    ("where was the child of {} born", "anna", "hull"),
    ("where was the child of {} born", "fay", "ripon"),
]


def graph(seed: str) -> Subgraph:
    return Subgraph(seeds=[Seed(IDS[seed], seed, 1.0, "exact")], names={v: k for k, v in IDS.items()},
                    edges=list(EDGES))


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(None, device="cpu")


@pytest.fixture(scope="module")
def samples(embedder: Embedder) -> list:  # type: ignore[type-arg]
    return [make_sample(q.format(f"[{s}]"), question_features(embedder.encode, q.format(f"[{s}]"), [s]),
                        graph(s), [IDS[a]]) for q, s, a in QUESTIONS]


@pytest.fixture(scope="module")
def trained(samples: list, embedder: Embedder) -> tuple:  # type: ignore[type-arg]
    features = RelationFeatures(embedder.encode)
    reasoner = PathReasoner(ReasonerConfig(hidden=64, dropout=0.0))
    router = RelationRouter(RouterConfig(hidden=64, dropout=0.0))
    fit(reasoner, samples, features, epochs=150, batch_size=6, lr=1e-2, show=False)
    fit(router, samples, features, epochs=100, batch_size=6, lr=1e-2, show=False)
    return router, reasoner, features


def test_flow_conv_shapes() -> None:
    conv = RelationFlowConv()
    x = torch.tensor([1.0, 0.0, 0.0])
    out = conv(x, torch.tensor([[0, 0, 1], [1, 2, 2]]), torch.tensor([0.5, 1.0, 1.0]))
    assert out.shape == (3,)
    assert out.tolist() == [0.0, 0.5, 1.0]  # clamped at 1


def test_layer_shapes(samples: list, embedder: Embedder) -> None:  # type: ignore[type-arg]
    c = collate(samples[:2], RelationFeatures(embedder.encode))
    n, e = c.batch.num_nodes, c.batch.edge_index.shape[1]
    assert e == 2 * 2 * len(EDGES) and c.rel_feat.shape[1] == 385
    out = PathReasoner()(c)
    assert out.score.shape == (n,) and out.weights.shape == (e, 3) and out.stop.shape == (2, 3)
    r = RelationRouter()(c)
    assert r.edge.shape == (e,) and r.node.shape == (n,)
    assert "max_hops=3" in repr(PathReasoner())
    assert samples[2].qvec.shape == ((1 + SEGMENTS) * 384,)


def test_learns_two_and_three_hop_with_paths(trained: tuple, samples: list, tmp_path) -> None:  # type: ignore[no-untyped-def,type-arg]
    router, reasoner, features = trained
    save_model(reasoner, tmp_path / "r.pt")
    save_model(router, tmp_path / "o.pt")
    pipeline = LearnedPipeline(load_model(tmp_path / "o.pt"), load_model(tmp_path / "r.pt"),  # type: ignore[arg-type]
                               features, PrecisionPolicy(mode="fp32"))
    results = pipeline.run(samples, top_k=3, max_hops=3)
    names = {v: k for k, v in IDS.items()}
    assert [names[r.answers[0].entity_id] for r in results] == [a for _, _, a in QUESTIONS]
    three = results[2].answers[0].paths[0]
    assert [(s.subject, s.predicate, s.object) for s in three] == [
        ("anna", "spouse", "bob"), ("bob", "parents", "carl"), ("carl", "place_of_birth", "dover")]
    two = results[0].answers[0].paths[0]
    assert [s.fact_id for s in two] == ["f0", "f3"]
    # the router keeps a smaller subgraph that still holds the answer
    for r, (_, _, answer) in zip(results, QUESTIONS, strict=True):
        kept = {n for e in r.routed.edges for n in (e.source_id, e.target_id)}
        assert IDS[answer] in kept and len(r.routed.edges) < len(EDGES)


def test_precision_falls_back_to_fp32(trained: tuple, samples: list) -> None:  # type: ignore[type-arg]
    router, reasoner, features = trained
    ok = LearnedPipeline(router, reasoner, features, PrecisionPolicy(device="cpu"))
    ok.run(samples, top_k=1, max_hops=3)
    assert ok.policy.chosen["reasoner"] in {"bf16", "fp32"} and "max_abs_diff" in ok.policy.checks["reasoner"]
    forced = LearnedPipeline(router, reasoner, features, PrecisionPolicy(device="cpu", force_fail=True))
    results = forced.run(samples, top_k=1, max_hops=3)
    assert forced.policy.chosen == {"router": "fp32", "reasoner": "fp32"}
    assert forced.policy.checks["reasoner"]["passed"] is False
    assert results[0].answers[0].entity_id == IDS["york"]
