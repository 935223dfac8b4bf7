"""Router and reasoner layers: shapes, and a tiny hand-made graph learned in a few steps."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from factloom.graph.types import Edge, Seed, Subgraph
from factloom.learn.qa import choose_readout, fit
from factloom.model import pipeline as pipeline_module
from factloom.model.embedder import Embedder
from factloom.model.features import (
    SEGMENTS,
    RelationFeatures,
    collate,
    edge_batch,
    make_sample,
    question_inputs,
)
from factloom.model.flow import RelationFlowConv
from factloom.model.pipeline import LearnedPipeline, load_model, save_model
from factloom.model.precision import PrecisionPolicy
from factloom.model.reasoner import (
    HopInstructions,
    PathReasoner,
    ReasonerConfig,
    ReasonerOutput,
    decode_answers,
    lexical_match,
    relation_path_loss,
)
from factloom.model.router import GuessOutcomes, RelationPlan, RelationRouter, RouterConfig
from tests.support.data import FAMILY

IDS = {n: f"e-{n}" for n in dict.fromkeys(x for s, _, o in FAMILY for x in (s, o))}
EDGES = [Edge(f"f{i}", IDS[s], IDS[o], p) for i, (s, p, o) in enumerate(FAMILY)]
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


def sample(embedder: Embedder, question: str, seed: str, answer: str, relations: tuple = ()):  # type: ignore[no-untyped-def,type-arg]
    qvec, qtok = question_inputs(embedder, question.format(f"[{seed}]"), [seed])
    return make_sample(question.format(f"[{seed}]"), qvec, graph(seed), [IDS[answer]], qtok=qtok,
                       relations=relations)


@pytest.fixture(scope="module")
def samples(embedder: Embedder) -> list:  # type: ignore[type-arg]
    return [sample(embedder, q, s, a) for q, s, a in QUESTIONS]


@pytest.fixture(scope="module")
def trained(samples: list, embedder: Embedder) -> tuple:  # type: ignore[type-arg]
    features = RelationFeatures(embedder.encode)
    reasoner = PathReasoner(ReasonerConfig(hidden=64, dropout=0.0))
    router = RelationRouter(RouterConfig(hidden=64, dropout=0.0))
    fit(reasoner, samples, features, epochs=150, batch_size=6, lr=3e-3, show=False)
    fit(router, samples, features, epochs=100, batch_size=6, lr=3e-3, show=False)
    return router, reasoner, features


def test_flow_conv_shapes() -> None:
    conv = RelationFlowConv()
    x = torch.tensor([1.0, 0.0, 0.0])
    out = conv(x, torch.tensor([[0, 0, 1], [1, 2, 2]]), torch.tensor([0.5, 1.0, 1.0]))
    assert out.shape == (3,)
    assert out.tolist() == [0.0, 0.5, 1.0]  # clamped at 1


def test_max_readout_ranks_the_strongest_path_not_the_most_paths() -> None:
    # node 4 is reached by three weakly attended facts, node 5 by one strongly attended fact
    x = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    edges = torch.tensor([[1, 2, 3, 6], [4, 4, 4, 5]])
    weights = torch.tensor([0.4, 0.4, 0.4, 0.9])
    summed = RelationFlowConv()(x, edges, weights)
    best = RelationFlowConv(aggr="max")(x, edges, weights)
    assert summed[4] > summed[5]  # 1.2 clamped to 1 beats 0.9
    assert best[4].item() == pytest.approx(0.4) and best[5].item() == pytest.approx(0.9)
    with pytest.raises(ValueError, match="aggr"):
        RelationFlowConv(aggr="mean")


def test_reasoner_trains_adding_and_answers_with_its_readout(samples: list, embedder: Embedder,  # type: ignore[no-untyped-def,type-arg]
                                                            tmp_path) -> None:
    c = collate(samples, RelationFeatures(embedder.encode))
    torch.manual_seed(0)
    model = PathReasoner(ReasonerConfig(hidden=32))
    assert model.config.readout == "max"
    model.eval()
    answering = model(c).hops
    model.readout = RelationFlowConv()  # what training reads: the clamped sum
    adding = model(c).hops
    model.train()
    for module in model.modules():  # no dropout, so that only the aggregation differs
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    training = model(c).hops
    assert all(torch.allclose(a, t) for a, t in zip(adding, training, strict=True))
    assert any(not torch.allclose(a, m) for a, m in zip(adding, answering, strict=True))
    # reasoners trained before the readout answer as they were trained
    old = saved_without(PathReasoner(ReasonerConfig(hidden=32)), "readout", tmp_path / "old.pt")
    assert isinstance(old, PathReasoner) and old.config.readout == "add"


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
    # the question's tokens ([CLS] … [SEP]), padded per batch
    assert samples[0].qtok is not None and samples[0].qtok.shape[1] == 384
    width = max(len(s.qtok) for s in samples[:2])
    assert c.qtok.shape == (2, width, 384) and c.qmask.shape == (2, width)
    assert c.qmask.sum(-1).tolist() == [len(s.qtok) for s in samples[:2]]
    assert out.logits is not None and out.logits.shape == (2, 3, len(c.keys))
    assert out.attention is not None and out.attention.shape == (2, 3, width)
    assert torch.allclose(out.attention.sum(-1), torch.ones(2, 3))
    assert float(out.attention[:, :, width - 1][~c.qmask[:, width - 1]].abs().sum()) == 0  # padding unread
    assert c.gold.shape == (2, 0)


@pytest.mark.parametrize("context", [False, True])
def test_hop_instructions_shapes(context: bool) -> None:
    layer = HopInstructions(text_dim=8, hidden=16, hops=3, dropout=0.0, context=context)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    out, attn = layer(torch.randn(2, 8), torch.randn(2, 5, 8), mask)
    assert out.shape == (2, 3, 16) and attn.shape == (2, 3, 5)
    assert float(attn[1, :, 2:].abs().sum()) == 0 and torch.allclose(attn.sum(-1), torch.ones(2, 3))


def test_token_context_reads_order_not_padding() -> None:
    torch.manual_seed(0)
    layer = HopInstructions(text_dim=8, hidden=16, hops=3, dropout=0.0, context=True).eval()
    q, tok = torch.randn(1, 8), torch.randn(1, 4, 8)
    alone, _ = layer(q, tok, torch.ones(1, 4, dtype=torch.bool))
    # the same question padded to 7 tokens in a batch: the GRU stops at its last real token
    padded = torch.cat([tok, torch.randn(1, 3, 8)], dim=1)
    mask = torch.tensor([[True] * 4 + [False] * 3])
    batched, _ = layer(q, padded, mask)
    assert torch.allclose(alone, batched, atol=1e-5)
    # the same words in another order give other instructions (a bag of tokens would not)
    flipped, _ = layer(q, tok.flip(1), torch.ones(1, 4, dtype=torch.bool))
    assert not torch.allclose(alone, flipped, atol=1e-3)


def test_gold_relations_and_path_loss(embedder: Embedder) -> None:
    gold = (("spouse", True), ("parents", True), ("place_of_birth", True))
    with_path = sample(embedder, QUESTIONS[2][0], "anna", "dover", gold)
    c = collate([with_path, sample(embedder, QUESTIONS[0][0], "anna", "york")], RelationFeatures(embedder.encode))
    assert c.gold.shape == (2, 3) and c.gold[1].tolist() == [-1, -1, -1]
    assert [c.keys[int(i)] for i in c.gold[0]] == list(gold)
    logits = torch.full((2, 3, len(c.keys)), -5.0)
    logits[0, torch.arange(3), c.gold[0]] = 5.0
    good = relation_path_loss(logits, c.gold)
    logits[0, torch.arange(3), c.gold[0]] = -5.0
    assert float(good) < 0.01 < float(relation_path_loss(logits, c.gold))
    assert float(relation_path_loss(logits, torch.full((2, 3), -1))) == 0.0
    # the loss reaches the model's parameters
    model = PathReasoner(ReasonerConfig(hidden=32))
    loss = model.loss(c, model(c))
    loss.backward()  # type: ignore[no-untyped-call]
    assert model.query.step[0].weight.grad is not None  # type: ignore[index]


def saved_without(model: torch.nn.Module, key: str, path: Path) -> torch.nn.Module:
    """``model`` saved as an artefact from before config ``key`` existed, then loaded back."""
    save_model(model, path)
    blob = torch.load(path, weights_only=False)
    del blob["config"][key]
    torch.save(blob, path)
    return load_model(path)


def test_pooled_question_still_loads(samples: list, embedder: Embedder, tmp_path) -> None:  # type: ignore[no-untyped-def,type-arg]
    # artefacts trained before per-hop instructions read one pooled vector; they still load and run
    loaded = saved_without(PathReasoner(ReasonerConfig(hidden=32, instructions=False)), "instructions",
                           tmp_path / "old.pt")
    assert isinstance(loaded, PathReasoner) and loaded.config.instructions is False
    # artefacts trained before the token GRU load without it
    reloaded = saved_without(PathReasoner(ReasonerConfig(hidden=32, context=False)), "context",
                             tmp_path / "before.pt")
    assert reloaded.config.context is False and reloaded.query.context is None  # type: ignore[union-attr]
    c = collate(samples[:2], RelationFeatures(embedder.encode))
    assert loaded(c).score.shape == (c.batch.num_nodes,)
    # a sample without token embeddings reads its pooled vector as its one token
    bare = make_sample("q", samples[0].qvec, graph("anna"), [IDS["york"]])
    c2 = collate([bare, samples[1]], RelationFeatures(embedder.encode))
    assert c2.qmask[0].sum() == 1 and torch.equal(c2.qtok[0, 0], torch.from_numpy(samples[0].qvec))


def test_training_keeps_the_readout_that_answers_its_questions(trained: tuple, samples: list,  # type: ignore[no-untyped-def,type-arg]
                                                               tmp_path) -> None:
    _, reasoner, features = trained
    try:
        # the tiny graph's questions are answered either way: a tie keeps the trained aggregation
        assert choose_readout(reasoner, samples, features) == {"add": 1.0, "max": 1.0}
        assert reasoner.config.readout == "add" and reasoner.readout.aggr == "add"
        save_model(reasoner, tmp_path / "r.pt")
        loaded = load_model(tmp_path / "r.pt")
        assert isinstance(loaded, PathReasoner) and loaded.readout.aggr == "add"
    finally:
        reasoner.set_readout("max")


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


def test_precision_check_of_vectors_is_relative() -> None:
    # the question encoder's outputs are embeddings (token components up to ~6): a relative error
    # of 1 % passes, 20 % falls back to fp32; an embedding has no "top entity" to compare
    ref = [torch.tensor([[6.0, -1.0, 0.5], [0.1, 0.2, 0.3]])]
    close = PrecisionPolicy(device="cpu", speed=False)
    assert close.calibrate("encoder", lambda: ref, run_low=lambda name: [ref[0] * 1.01], vectors=True) == "bf16"
    far = PrecisionPolicy(device="cpu")
    assert far.calibrate("encoder", lambda: ref, run_low=lambda name: [ref[0] * 1.2], vectors=True) == "fp32"
    assert far.checks["encoder"]["passed"] is False and far.checks["encoder"]["max_rel_error"] == pytest.approx(0.2)


class _Clock:
    """A timer that moves only when a timed function says what it cost: no sleeps to race."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def costs(self, ms: float, out: list[torch.Tensor]) -> Callable[..., list[torch.Tensor]]:
        def run(*_: object) -> list[torch.Tensor]:
            self.now += ms / 1000
            return out
        return run


def test_precision_is_kept_only_where_it_is_faster() -> None:
    ref = [torch.tensor([0.1, 0.9, 0.0])]
    clock = _Clock()
    slow, fast, fp32 = clock.costs(10, ref), clock.costs(0, ref), clock.costs(3, ref)

    slower = PrecisionPolicy(device="cpu", clock=clock)
    assert slower.calibrate("reasoner", fp32, run_low=slow) == "fp32"
    check = slower.checks["reasoner"]
    assert check["same_top"] is True and check["faster"] is False and check["passed"] is False
    assert (check["ms_low"], check["ms_fp32"]) == (10, 3)
    quicker = PrecisionPolicy(device="cpu", clock=clock)
    assert quicker.calibrate("reasoner", fp32, run_low=fast) == "bf16"
    assert quicker.checks["reasoner"]["faster"] is True and quicker.checks["reasoner"]["passed"] is True
    # numerics alone: the slower low precision is kept
    assert PrecisionPolicy(device="cpu", speed=False).calibrate("reasoner", fp32, run_low=slow) == "bf16"


def test_precision_within_the_timing_noise_is_fp32() -> None:
    # 5 % faster is within what a shared machine's timings move by: one process would pick bf16 and
    # the next fp32, so a low precision must save min_gain (10 %) of the time to be kept
    ref = [torch.tensor([0.1, 0.9, 0.0])]
    clock = _Clock()
    fp32, a_bit_faster = clock.costs(10, ref), clock.costs(9.5, ref)

    policy = PrecisionPolicy(device="cpu", clock=clock)
    assert policy.calibrate("encoder", fp32, run_low=a_bit_faster) == "fp32"
    assert policy.checks["encoder"]["faster"] is False
    assert PrecisionPolicy(device="cpu", min_gain=0.0, clock=clock).calibrate(
        "encoder", fp32, run_low=a_bit_faster) == "bf16"


def test_paths_may_go_round_a_self_loop(embedder: Embedder) -> None:
    # PathQuestion-L: "the tracks of the tracks of [Believe]" is Believe, round "Believe tracks Believe" twice
    ids = {"believe": "e-believe", "cher": "e-cher"}
    edges = [Edge("loop", ids["believe"], ids["believe"], "tracks"), Edge("art", ids["believe"], ids["cher"], "artist")]
    g = Subgraph(seeds=[Seed(ids["believe"], "believe", 1.0, "exact")], names={v: k for k, v in ids.items()},
                 edges=edges)
    qvec, qtok = question_inputs(embedder, "what is the tracks of tracks of [believe]", ["believe"])
    c = collate([make_sample("q", qvec, g, [ids["believe"]], qtok=qtok)], RelationFeatures(embedder.encode))
    tracks = torch.tensor([c.keys[int(t)][0] == "tracks" for t in c.batch.edge_type], dtype=torch.float)
    weights = tracks[:, None].repeat(1, 3)  # (E, T): every hop reads "tracks"
    conv, x, hops = RelationFlowConv(), c.batch.seed.float(), []
    for t in range(3):
        x = conv(x, c.batch.edge_index, weights[:, t])
        hops.append(x)
    out = ReasonerOutput(score=hops[1], weights=weights, hops=hops, stop=torch.tensor([[0.0, 1.0, 0.0]]))
    top = decode_answers(c, out, top_k=1)[0][0]
    assert top.entity_id == ids["believe"]
    assert [[s.fact_id for s in p] for p in top.paths][0] == ["loop", "loop"]


def test_paths_through_a_hub_are_found_without_revisiting_it(embedder: Embedder) -> None:
    # MetaQA: "the genres of the films of X's genre" walks X → Drama → thousands of films → Drama;
    # every such walk uses a film's one fact twice, so no distinct path exists, and the search must
    # not look through Drama's in-edges once per film (this took seconds per question)
    n = 3000
    edges = [Edge("x", "e-x", "e-drama", "has_genre")] + [
        Edge(f"f{i}", f"e-f{i}", "e-drama", "has_genre") for i in range(n)]
    names = {"e-x": "x", "e-drama": "drama"} | {f"e-f{i}": f"film {i}" for i in range(n)}
    g = Subgraph(seeds=[Seed("e-x", "x", 1.0, "exact")], names=names, edges=edges)
    qvec, qtok = question_inputs(embedder, "what genres do the films of the genre of [x] have", ["x"])
    c = collate([make_sample("q", qvec, g, ["e-x"], qtok=qtok)], RelationFeatures(embedder.encode))
    forward = torch.tensor([c.keys[int(t)][1] for t in c.batch.edge_type], dtype=torch.float)
    weights = torch.stack([forward, 1 - forward, forward], dim=1)  # (E, T): has_genre, its inverse, has_genre
    conv, x, hops = RelationFlowConv(), c.batch.seed.float(), []
    for t in range(3):
        x = conv(x, c.batch.edge_index, weights[:, t])
        hops.append(x)
    out = ReasonerOutput(score=hops[2], weights=weights, hops=hops, stop=torch.tensor([[0.0, 0.0, 1.0]]))
    started = time.perf_counter()
    top = decode_answers(c, out, top_k=1)[0][0]
    assert time.perf_counter() - started < 2.0  # 15 s when every film re-read Drama's in-edges
    assert top.entity_id == "e-drama" and len(top.paths) == 3
    ids = [[s.fact_id for s in p] for p in top.paths]
    assert all(p[0] == "x" and p[1] == p[2] for p in ids), ids  # there and back along one fact


def test_lexical_match_finds_the_relation_the_hop_reads() -> None:
    tok = torch.randn(1, 4, 8)  # (B, L, D)
    attention = torch.zeros(1, 3, 4)
    attention[0, torch.arange(3), torch.tensor([2, 0, 3])] = 1.0  # hop t reads token 2, 0, 3
    rel_feat = torch.cat([tok[0], torch.ones(4, 1)], dim=-1)  # relation r is named like token r
    sim = lexical_match(attention, tok, rel_feat)
    assert sim.shape == (1, 3, 4) and sim[0].argmax(-1).tolist() == [2, 0, 3]
    assert torch.allclose(sim[0, torch.arange(3), torch.tensor([2, 0, 3])], torch.ones(3), atol=1e-5)


def test_router_keeps_each_hops_runner_up(samples: list, embedder: Embedder) -> None:  # type: ignore[type-arg]
    torch.manual_seed(0)
    c = collate(samples[:2], RelationFeatures(embedder.encode))
    plain = RelationRouter(RouterConfig(hidden=32, top_k=0)).eval()
    ranked = RelationRouter(RouterConfig(hidden=32, top_k=2)).eval()
    ranked.load_state_dict(plain.state_dict())
    with torch.no_grad():
        for m in (plain, ranked):  # a saturated relation softmax
            m._scale = 1e4
            m.lexical.fill_(0.0)  # type: ignore[union-attr]
        a, b = plain(c), ranked(c)
    assert a.logits is not None
    order = a.logits.argsort(dim=-1, descending=True)  # (B, T, R)
    firsts = set(order[0, :, 0].tolist())
    runner_up = int(order[0, 0, 1])  # hop 1's second relation, first at no hop
    assert runner_up not in firsts
    edges = (edge_batch(c) == 0) & (c.batch.edge_type == runner_up)
    assert bool(edges.any())
    assert float(a.edge[edges].max()) < 0.02 <= float(b.edge[edges].min())
    assert torch.all(b.edge >= a.edge)


def test_router_plans_each_hop_among_the_relations_present(trained: tuple, embedder: Embedder) -> None:  # type: ignore[type-arg]
    router, reasoner, features = trained
    pipeline = LearnedPipeline(router, reasoner, features)
    assert pipeline.can_plan
    predicates = sorted({p for _, p, _ in FAMILY})
    qvec, qtok = question_inputs(embedder, "what is the birthplace of [anna] 's husband 's father", ["anna"])
    plan = pipeline.plan([qvec], [qtok], predicates, max_hops=3, keep=1)
    assert plan.depth == [3]
    # the learned hops, each chosen among the relations the store says the frontier has
    around = {0: [("children", True), ("place_of_birth", True), ("spouse", True)],
              1: [("parents", True), ("place_of_birth", True), ("spouse", False)],
              2: [("children", False), ("place_of_birth", True), ("spouse", True)]}
    assert [plan.choose(0, t, around[t])[0] for t in range(3)] == [
        ("spouse", True), ("parents", True), ("place_of_birth", True)]
    assert plan.choose(0, 2, around[2]) == [("place_of_birth", True)]  # keep 1, and no next hop to look at
    assert plan.guess(0, 2) == [("place_of_birth", True)]  # sure, unasked: what choose picks among those present
    # hop 1 also follows hop 2's strongest relation where the frontier has it (hops shifted by a self-loop)
    assert plan.choose(0, 1, around[1]) == [("parents", True), ("place_of_birth", True)]
    assert plan.choose(0, 0, [("spouse", True)]) == [("spouse", True)]
    assert ("new_relation", True) in plan.choose(0, 1, [("new_relation", True), ("parents", True)])  # unknown: kept
    wide = pipeline.plan([qvec], [qtok], predicates, max_hops=2, keep=3, mass=2.0)
    assert wide.depth == [2] and len(wide.choose(0, 0, around[0])) == 3  # mass never reached: keep
    assert wide.choose(0, 2, around[2]) == []  # beyond the asked hops
    # the hops expanded are those the question asks for with at least min_hop_mass (always one)
    assert pipeline.plan([qvec], [qtok], predicates, max_hops=3, min_hop_mass=1.01).depth == [1]
    assert pipeline.plan([qvec], [qtok], predicates, max_hops=2, min_hop_mass=0.0).depth == [2]
    pooled = RelationRouter(RouterConfig(hidden=16, instructions=False))
    assert not LearnedPipeline(pooled, reasoner, features).can_plan
    with pytest.raises(ValueError, match="cannot plan"):
        pooled.plan(torch.zeros(1, 384), torch.zeros(1, 1, 384), torch.ones(1, 1, dtype=torch.bool),
                    torch.zeros(2, 385), [("a", True), ("a", False)], keep=1, mass=0.9, max_hops=3,
                    min_hop_mass=0.2)


def test_plan_follows_a_hops_relations_until_they_hold_its_mass() -> None:
    keys = [("genre", True), ("directed_by", True), ("written_by", True)]
    logits = torch.tensor([[[6.0, 0.0, 0.0]], [[1.0, 1.0, -2.0]]])  # (B=2, T=1, R=3)
    plan = RelationPlan(keys, logits, depth=[1, 1], keep=5, mass=0.8)
    assert plan.choose(0, 0, keys) == [("genre", True)]  # confident: the runner-up (~0.25 %) is not followed
    assert sorted(plan.choose(1, 0, keys)) == [("directed_by", True), ("genre", True)]  # 0.49 + 0.49
    assert len(RelationPlan(keys, logits, depth=[1, 1], keep=1, mass=0.8).choose(1, 0, keys)) == 1
    # a guess, made without knowing which relations are present, is one relation holding the mass
    assert plan.guess(0, 0) == [("genre", True)]
    assert plan.guess(1, 0) is None  # 0.49 + 0.49: the store is asked


def test_plan_leaves_an_uncertain_relation_into_a_hub_before_the_last_hop() -> None:
    keys = [("genre", False), ("directed_by", False), ("written_by", True)]
    # hop 0: directed_by 0.54, genre 0.44 (both needed for the mass); hop 1: written_by, sure
    logits = torch.tensor([[[1.0, 1.2, -2.0], [0.0, 0.0, 5.0]]])  # (B=1, T=2, R=3)
    plan = RelationPlan(keys, logits, depth=[2], keep=5, mass=0.8)
    hub = {("directed_by", False): 3, ("genre", False): 4005, ("written_by", True): 2}
    # back from a genre to its 4,005 films is not followed on a 44 % chance; the next hop's strongest is
    assert plan.choose(0, 0, hub) == [("directed_by", False), ("written_by", True)]
    few = {**hub, ("genre", False): 40}
    assert plan.choose(0, 0, few) == [("directed_by", False), ("genre", False), ("written_by", True)]
    assert plan.choose(0, 0, list(hub)) == plan.choose(0, 0, few)  # uncounted: as before
    # the hop's strongest relation is followed however many facts it reads
    assert plan.choose(0, 0, {**hub, ("directed_by", False): 5000})[0] == ("directed_by", False)
    # the last hop's relations are the answers': never left for their size
    last = RelationPlan(keys, logits[:, :1], depth=[1], keep=5, mass=0.8)
    assert last.choose(0, 0, hub) == [("directed_by", False), ("genre", False)]
    # the strongest into a hub is left too where a cheap relation holds half its attention or more
    # (genre 0.54, directed_by 0.44), and followed where it leads by more (genre 0.73, directed_by 0.24)
    close = RelationPlan(keys, torch.tensor([[[1.2, 1.0, -2.0], [0.0, 0.0, 5.0]]]), depth=[2], keep=5, mass=0.8)
    assert close.choose(0, 0, hub) == [("directed_by", False), ("written_by", True)]
    ahead = RelationPlan(keys, torch.tensor([[[1.14, 0.0, -2.0], [0.0, 0.0, 5.0]]]), depth=[2], keep=5, mass=0.8)
    assert ahead.choose(0, 0, hub) == [("genre", False), ("directed_by", False), ("written_by", True)]


def test_a_kb_whose_guesses_miss_stops_guessing_but_probes_now_and_then() -> None:
    keys = [("genre", True), ("directed_by", True)]
    sure = torch.tensor([[[6.0, 0.0]]])  # (B=1, T=1, R=2): genre, ~99.8 %
    outcomes = GuessOutcomes(limit=0.1, window=64, probe_every=16)
    for _ in range(16):  # each guess misses: retrieval then asks choose for the question
        plan = RelationPlan(keys, sure, depth=[1], keep=5, mass=0.8, outcomes=outcomes)
        assert plan.guess(0, 0) == [("genre", True)]
        assert plan.choose(0, 0, [("directed_by", True)]) == [("directed_by", True)]
    assert (outcomes.tried, outcomes.missed) == (16, 16)
    later = [RelationPlan(keys, sure, depth=[1], keep=5, mass=0.8, outcomes=outcomes).guess(0, 0) for _ in range(32)]
    assert sum(g is not None for g in later) == 2  # one probe in 16
    hits = GuessOutcomes(limit=0.1, window=64)
    for _ in range(100):  # guesses that reach something: never asked after
        assert RelationPlan(keys, sure, depth=[1], keep=5, mass=0.8, outcomes=hits).guess(0, 0) is not None
    assert hits.missed == 0 and hits.tried <= 64  # the window forgets the older half


def test_seed_gate_decides_the_flow_back_to_the_topic(samples: list, embedder: Embedder, tmp_path) -> None:  # type: ignore[no-untyped-def,type-arg]
    torch.manual_seed(0)
    c = collate(samples[:2], RelationFeatures(embedder.encode))
    plain = PathReasoner(ReasonerConfig(hidden=32, seed_gate=False)).eval()
    gated = PathReasoner(ReasonerConfig(hidden=32)).eval()
    gated.load_state_dict(plain.state_dict(), strict=False)
    seed = c.batch.seed > 0
    with torch.no_grad():
        base = plain(c)
        assert any(float(h[seed].max()) > 0 for h in base.hops)  # spouse → spouse⁻¹ walks back to anna
        gated.seed_gate.bias.fill_(-30.0)  # type: ignore[union-attr]
        closed = gated(c)
        assert all(float(h[seed].abs().max()) == 0 for h in closed.hops)
        assert float(closed.score[seed].max()) == 0  # the topic is never an answer
        gated.seed_gate.bias.fill_(30.0)  # type: ignore[union-attr]
        assert torch.allclose(gated(c).score, base.score, atol=1e-6)  # open: as without the gate
    # reasoners trained before the gate load without it
    assert saved_without(plain, "seed_gate", tmp_path / "old.pt").seed_gate is None  # type: ignore[union-attr]


def test_planned_graphs_are_read_whole(trained: tuple, samples: list) -> None:  # type: ignore[type-arg]
    router, reasoner, features = trained
    pipeline = LearnedPipeline(router, reasoner, features, PrecisionPolicy(mode="fp32"))
    whole, routed = (pipeline.run(samples[:2], top_k=1, max_hops=3, planned=[p, p]) for p in (True, False))
    assert [len(r.routed.edges) for r in whole] == [len(s.edges) for s in samples[:2]]
    assert all(len(r.routed.edges) < len(s.edges) for r, s in zip(routed, samples[:2], strict=True))
    assert [r.answers[0].name for r in whole] == [r.answers[0].name for r in routed] == ["york", "wells"]


def test_question_only_outputs_are_cached_and_change_nothing(trained: tuple, samples: list,  # type: ignore[type-arg]
                                                             embedder: Embedder,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    router, reasoner, features = trained
    cold = LearnedPipeline(router, reasoner, features, PrecisionPolicy(mode="fp32"), question_cache=0)
    warm = LearnedPipeline(router, reasoner, features, PrecisionPolicy(mode="fp32"))
    predicates = sorted({p for _, p, _ in FAMILY})
    qs = [question_inputs(embedder, q, ["anna"]) for q in ("where was the spouse of [anna] born",
                                                          "what is the birthplace of [anna] 's husband 's father")]
    computed: list[int] = []  # questions the models read
    plan_relations_, instructions_ = pipeline_module.plan_relations, reasoner.instructions
    monkeypatch.setattr(pipeline_module, "plan_relations",
                        lambda r, qvecs, *a, **k: computed.append(len(qvecs)) or plan_relations_(r, qvecs, *a, **k))
    monkeypatch.setattr(reasoner, "instructions",
                        lambda qvec, *a: computed.append(len(qvec)) or instructions_(qvec, *a))
    ref = cold.plan([q for q, _ in qs], [t for _, t in qs], predicates, max_hops=3)
    assert computed == [2]
    for order in ([0, 1, 0], [1, 0], [1, 1, 0]):  # first: the two distinct questions computed; then cached
        plan = warm.plan([qs[i][0] for i in order], [qs[i][1] for i in order], predicates, max_hops=3)
        assert plan.depth == [ref.depth[i] for i in order]
        assert torch.allclose(plan.logits, ref.logits[order], atol=1e-6)
    assert computed == [2, 2]
    assert warm.plan([qs[0][0]], [qs[0][1]], predicates, max_hops=2).depth == [2]  # another bound: computed
    assert computed == [2, 2, 1]
    computed.clear()
    # questions of different lengths in one batch: each one's cached token attention is padded back
    batch = [samples[0], samples[2], samples[0]]
    assert len(samples[0].qtok) != len(samples[2].qtok)
    want = cold.run(batch, top_k=2, max_hops=3, planned=[True] * 3)
    for _ in range(2):
        got = warm.run(batch, top_k=2, max_hops=3, planned=[True] * 3)
        assert [[(a.name, round(a.score, 5)) for a in r.answers] for r in got] == \
               [[(a.name, round(a.score, 5)) for a in r.answers] for r in want]
    assert computed == [3, 2]  # cold: the whole batch in the model; warm: its two questions once
    c = collate(batch, features)
    with torch.no_grad():
        cached, direct = warm._question_instructions(c), instructions_(c.qvec, c.qtok, c.qmask)
    assert cached is not None and computed == [3, 2]
    for got_part, want_part in zip(cached, direct, strict=True):  # (B, T, H), then (B, T, L) zero-padded
        assert got_part.shape == want_part.shape and torch.allclose(got_part, want_part, atol=1e-6)


def test_training_data_errors_name_the_file_and_what_is_wrong(tmp_path: Path) -> None:
    from factloom.learn.qa import jobs_for, parse_args, require_files

    with pytest.raises(SystemExit, match=r"lacks qa_2hop_dev.txt, kb.txt: --data-dir must be laid out"):
        require_files("metaqa", tmp_path, ["2hop"], ("train", "dev"), kb=True)
    (tmp_path / "PQ-2H_train.txt").write_text("")
    with pytest.raises(SystemExit, match="lacks PQ-2H_dev.txt:"):
        require_files("pathquestion", tmp_path, ["PQ-2H"], ("train", "dev"))
    with pytest.raises(SystemExit, match="unknown question set.s. 4hop for metaqa; known: 1hop, 2hop, 3hop"):
        jobs_for(parse_args("router", ["--dataset", "metaqa", "--set", "4hop", "--data-dir", str(tmp_path)]))
    pairs = tmp_path / "pairs.jsonl"
    for text, message in ((b'{"question": "who directed [Heat]", "answers": ["Michael Mann"]}\nnot json\n',
                           "pairs.jsonl:2: not JSON"),
                          (b'{"question": "who directed [Heat]", "answers": "Michael Mann"}\n',
                           "pairs.jsonl:1: needs 'question' and a non-empty 'answers' list"),
                          (b'["who directed [Heat]", "Michael Mann"]\n', "pairs.jsonl:1: needs 'question'")):
        pairs.write_bytes(text)
        with pytest.raises(SystemExit, match=message):
            jobs_for(parse_args("router", ["--dataset", "jsonl", "--kb", "k", "--data-dir", str(pairs)]))
    pairs.write_text('{"question": "who directed [Heat]", "answers": ["Michael Mann"]}\n')
    [job] = jobs_for(parse_args("router", ["--dataset", "jsonl", "--kb", "k", "--data-dir", str(pairs)]))
    assert (job.kb, job.train[0].answers) == ("k", ["Michael Mann"])
