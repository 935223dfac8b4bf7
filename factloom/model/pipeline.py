"""Router → reasoner over a batch of questions, in the precision the policy chose; artefact I/O."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from factloom.graph.types import Subgraph
from factloom.model.embedder import LRUCache
from factloom.model.features import (
    Collated,
    RelationFeatures,
    RelationKey,
    Sample,
    collate,
    make_sample,
    question_tensors,
)
from factloom.model.pathrank import Answer
from factloom.model.precision import PrecisionPolicy
from factloom.model.reasoner import PathReasoner, ReasonerConfig, decode_answers
from factloom.model.router import (
    GuessOutcomes,
    RelationPlan,
    RelationRouter,
    RouterConfig,
    RouterOutput,
    relation_entropy,
    select_subgraphs,
)

__all__ = ["LearnedPipeline", "Result", "save_model", "load_model", "plan_relations", "relation_vocabulary"]


def save_model(model: RelationRouter | PathReasoner, path: Path, **meta: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"kind": "router" if isinstance(model, RelationRouter) else "reasoner",
                "config": model.hparams(), "state": model.state_dict(), "meta": meta}, path)


def load_model(path: Path) -> RelationRouter | PathReasoner:
    if not Path(path).exists():
        raise FileNotFoundError(f"model artefact {path} does not exist")
    blob = torch.load(path, map_location="cpu", weights_only=False)
    model: RelationRouter | PathReasoner
    blob["config"].setdefault("segments", 0)  # artefacts from before question segments
    blob["config"].setdefault("instructions", False)  # artefacts from before per-hop instructions
    blob["config"].setdefault("context", False)  # artefacts from before the token GRU
    blob["config"].setdefault("lexical", False)  # artefacts from before the lexical match
    if blob["kind"] == "router":
        blob["config"].setdefault("top_k", 0)  # routers from before top-k routing: threshold only
    else:
        blob["config"].setdefault("seed_gate", False)  # reasoners from before the seed gate
        blob["config"].setdefault("readout", "add")  # reasoners from before the max readout
    if blob["kind"] == "router":
        model = RelationRouter(RouterConfig(**blob["config"]))
    else:
        model = PathReasoner(ReasonerConfig(**blob["config"]))
    model.load_state_dict(blob["state"])
    return model.eval()


def relation_vocabulary(features: RelationFeatures, predicates: Sequence[str],
                        device: str = "cpu") -> tuple[list[RelationKey], torch.Tensor]:
    """Every relation key of ``predicates`` (both directions) and their feature rows ``(R, D + 1)``."""
    keys: list[RelationKey] = [(p, forward) for p in predicates for forward in (True, False)]
    return keys, features.matrix(keys).to(device)


# how much of a hop's relation attention retrieval follows: the relations beyond 0.8 are mostly a
# hub's (MetaQA "Drama" → thousands of films); at 0.99, 3-hop graphs held 1.8x the facts and the
# answer less often (docs/reasoning.md)
PLAN_MASS = 0.8
# expand a hop when the router gives the question that many hops or more with this probability: at
# 0.01 a third of MetaQA's 1-hop questions were expanded 3 hops deep (720 facts each, not 21); at
# 0.2 still 2.3 % ("what type of film is [X]" reads like a 3-hop question's end, P 0.2-0.3), whose
# 3-hop graphs doubled a 1-hop batch's time. MetaQA's dev questions need their own hop count with
# P >= 0.62 (3-hop) to 1.0 (1-hop), so 0.4 sits between; same hits@1 (docs/reasoning.md)
PLAN_MIN_HOP_MASS = 0.4


@torch.no_grad()
def plan_relations(router: RelationRouter, qvecs: Sequence[npt.NDArray[np.float32]],
                   qtoks: Sequence[npt.NDArray[np.float32] | None],
                   vocabulary: tuple[list[RelationKey], torch.Tensor] | None, *, max_hops: int, keep: int = 5,
                   mass: float = PLAN_MASS, min_hop_mass: float = PLAN_MIN_HOP_MASS,
                   device: str = "cpu") -> RelationPlan:
    """The router's per-hop relation scores over a kb's relation ``vocabulary``
    (:func:`relation_vocabulary`) from the questions alone, in fp32 (a few questions, one small
    matrix); retrieval then follows each hop's chosen relations
    (:meth:`~factloom.model.router.RelationPlan.choose`). Serving and the reasoner's training
    graphs (:func:`~factloom.learn.qa.prepare` with a router) plan alike."""
    if vocabulary is None:  # a kb without facts
        return RelationPlan([], torch.zeros(len(qvecs), max_hops, 0), [max_hops] * len(qvecs), keep, mass)
    qvec, qtok, qmask = question_tensors(qvecs, qtoks)
    keys, rel_feat = vocabulary
    return router.plan(qvec.to(device), qtok.to(device), qmask.to(device), rel_feat, keys,
                       keep=keep, mass=mass, max_hops=max_hops, min_hop_mass=min_hop_mass)


@dataclass
class Result:
    answers: list[Answer]
    routed: Subgraph  # what the reasoner read
    candidate_edges: int
    # per hop the question asks for (hop 1 first), the entropy in nats of the router's relation
    # distribution (:func:`~factloom.model.router.relation_entropy`): over the kb's relation
    # vocabulary where the router planned the retrieval, over the candidate graph's relations where
    # it routed them; empty without a router (or a graph without relations)
    attention_entropy: list[float] = field(default_factory=list)


class LearnedPipeline:
    """The learned query path for one knowledge base's models.

    Args:
        router, reasoner: trained modules (``None`` router: the reasoner reads the k-hop subgraph).
        features: relation feature cache (shared with training).
        policy: precision per operation; calibrated on the first batch.
        question_cache: how many questions keep what the models compute from the question alone
            (the router's plan per kb vocabulary, the reasoner's hop instructions), found by a
            digest of the question's embeddings: with the entity mentions stripped, phrasings repeat.
    """

    def __init__(self, router: RelationRouter | None, reasoner: PathReasoner, features: RelationFeatures,
                 policy: PrecisionPolicy | None = None, device: str = "cpu", question_cache: int = 1024) -> None:
        self.device = device
        self.router = router.to(device).eval() if router is not None else None
        self.reasoner = reasoner.to(device).eval()
        self.features = features
        self.policy = policy or PrecisionPolicy(device=device)
        self._calibrated = False
        self._calibrating = threading.Lock()  # batch workers may run the first batches at once
        self._vocab: dict[tuple[str, ...], tuple[list[RelationKey], torch.Tensor]] = {}
        self._question_cache = question_cache
        self._plans: dict[tuple[str, ...], LRUCache[tuple[torch.Tensor, int]]] = {}  # per vocabulary
        self._outcomes: dict[tuple[str, ...], GuessOutcomes] = {}  # per vocabulary: how its guesses fare
        self._instructions: LRUCache[tuple[torch.Tensor, torch.Tensor]] = LRUCache(question_cache)
        # each planned question's per-hop entropy, from :meth:`plan` to :meth:`run` (by its digest)
        self._planned_entropy: LRUCache[list[float]] = LRUCache(max(question_cache, 1024))
        self._cache_lock = threading.Lock()  # batch workers share the caches

    def _calibrate(self, samples: Sequence[Sample]) -> None:
        c = collate(samples, self.features)
        c = _to(c, self.device)
        if self.router is not None:
            router = self.router

            def run_router() -> list[torch.Tensor]:
                return _split(router(c).node, c.node_offset)

            self.policy.calibrate("router", run_router)

        def run_reasoner() -> list[torch.Tensor]:
            return _split(self.reasoner(c).score, c.node_offset)

        self.policy.calibrate("reasoner", run_reasoner)
        self._calibrated = True

    @property
    def can_plan(self) -> bool:
        """Whether the router can choose each hop's relations before retrieval (:meth:`plan`)."""
        return self.router is not None and self.router.can_plan

    @torch.no_grad()
    def plan(self, qvecs: Sequence[npt.NDArray[np.float32]], qtoks: Sequence[npt.NDArray[np.float32] | None],
             predicates: Sequence[str], *, max_hops: int, keep: int = 5, mass: float = PLAN_MASS,
             min_hop_mass: float = PLAN_MIN_HOP_MASS) -> RelationPlan:
        """The router's per-hop relation scores over the kb's ``predicates`` (both directions) from
        the questions alone (:func:`plan_relations`, the kb's relation features cached)."""
        router = self.router
        assert router is not None
        if not predicates:
            return plan_relations(router, qvecs, qtoks, None, max_hops=max_hops, keep=keep, mass=mass,
                                  min_hop_mass=min_hop_mass, device=self.device)
        vocabulary = self._vocabulary(tuple(predicates))
        keys = [(_question_key(v, t), max_hops, min_hop_mass) for v, t in zip(qvecs, qtoks, strict=True)]

        def compute(todo: list[int]) -> list[tuple[torch.Tensor, int]]:
            fresh = plan_relations(router, [qvecs[i] for i in todo], [qtoks[i] for i in todo], vocabulary,
                                   max_hops=max_hops, keep=keep, mass=mass, min_hop_mass=min_hop_mass,
                                   device=self.device)
            return [(fresh.logits[n], fresh.depth[n]) for n in range(len(todo))]

        with self._cache_lock:
            cache = self._plans.get(tuple(predicates))  # gone only if another batch evicted the vocabulary
            rows = cache.through(keys, compute) if cache is not None else compute(list(range(len(keys))))
            outcomes = self._outcomes.setdefault(tuple(predicates), GuessOutcomes())
        logits = torch.stack([r[0] for r in rows])  # (B, T, R)
        entropy = relation_entropy(logits).tolist()  # (B, T)
        with self._cache_lock:
            for (digest, _, _), hops, (_, depth) in zip(keys, entropy, rows, strict=True):
                self._planned_entropy.keep(digest, hops[:depth])
        return RelationPlan(vocabulary[0], logits, [r[1] for r in rows], keep, mass, outcomes)

    def _vocabulary(self, predicates: tuple[str, ...]) -> tuple[list[RelationKey], torch.Tensor]:
        # one kb's relation keys and their features, kept while its predicate list is unchanged
        # (a PathQuestion kb has 363 predicates: rebuilding the matrix per batch cost ~5 ms), and
        # the plans made over them
        with self._cache_lock:
            hit = self._vocab.get(predicates)
            if hit is None:
                hit = relation_vocabulary(self.features, predicates, self.device)
                if len(self._vocab) >= 8:
                    oldest = next(iter(self._vocab))
                    self._vocab.pop(oldest)
                    self._plans.pop(oldest, None)
                    self._outcomes.pop(oldest, None)
                self._vocab[predicates] = hit
                self._plans[predicates] = LRUCache(self._question_cache)
            return hit

    def _question_instructions(self, c: Collated) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The reasoner's hop instructions ``(B, T, H)`` and token attention ``(B, T, L)`` for the
        batch, each question's from the cache or computed once for all the missing ones."""
        if not self.reasoner.config.instructions or not self._question_cache:
            return None
        keys = [_question_key(s.qvec, s.qtok) for s in c.samples]

        def compute(todo: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
            qvec, qtok, qmask = question_tensors([c.samples[i].qvec for i in todo], [c.samples[i].qtok for i in todo])
            queries, attention = self.reasoner.instructions(qvec.to(self.device), qtok.to(self.device),
                                                            qmask.to(self.device))  # (b, T, H), (b, T, L')
            return [(queries[n], attention[n, :, : int(qmask[n].sum())]) for n in range(len(todo))]

        with self._cache_lock:
            rows = self._instructions.through(keys, compute)
        width = c.qtok.shape[1]
        return (torch.stack([q for q, _ in rows]),
                torch.stack([torch.nn.functional.pad(a, (0, width - a.shape[-1])) for _, a in rows]))

    @torch.no_grad()
    def run(self, samples: Sequence[Sample], *, top_k: int, max_hops: int,
            planned: Sequence[bool] | None = None) -> list[Result]:
        """Answer ``samples``. A sample whose graph came from the router's plan (``planned``, see
        :meth:`plan`) already holds only the relations the router chose, hop by hop from the seeds,
        so the reasoner reads it whole; the others (k-hop candidates) are routed first."""
        if not samples:
            return []
        if not self._calibrated:
            with self._calibrating:
                if not self._calibrated:
                    self._calibrate(samples)
        planned = list(planned) if planned is not None else [False] * len(samples)
        routed = [Subgraph(seeds=[], names=s.names, edges=s.edges) for s in samples]
        to_route = [i for i, p in enumerate(planned) if not p]
        entropy: list[list[float]] = [[] for _ in samples]
        if self.router is not None and any(planned):
            with self._cache_lock:
                for i in (i for i, p in enumerate(planned) if p):
                    entropy[i] = self._planned_entropy.hit(_question_key(samples[i].qvec, samples[i].qtok)) or []
        if self.router is not None and to_route:
            cfg = self.router.config
            c = _to(collate([samples[i] for i in to_route], self.features), self.device)
            with self.policy.scope("router"):
                out = self.router(c)
            chosen = select_subgraphs(c, out, threshold=cfg.threshold, budget=cfg.budget, max_hops=max_hops)
            for i, hops in zip(to_route, _routed_entropy(out, max_hops), strict=True):
                entropy[i] = hops if samples[i].edges else []
            for i, g in zip(to_route, chosen, strict=True):
                # nothing reached the router's threshold: the reasoner reads the candidates
                routed[i] = g if g.edges or not samples[i].edges else \
                    Subgraph(seeds=g.seeds, names=samples[i].names, edges=samples[i].edges, truncated=True)
        second = [s if p else _with_edges(s, g) for s, g, p in zip(samples, routed, planned, strict=True)]
        c2 = _to(collate(second, self.features), self.device)
        with self.policy.scope("reasoner"):
            c2.instructions = self._question_instructions(c2)
            out2 = self.reasoner(c2)
        if max_hops < self.reasoner.config.max_hops:
            # the asker's bound: hops beyond it carry no mass
            out2.stop[:, max_hops:] = 0
            out2.score = sum(out2.stop[c2.batch.batch, t] * out2.hops[t] for t in range(max_hops))  # type: ignore[assignment]
        answers = decode_answers(c2, out2, top_k=top_k)
        return [Result(answers=a, routed=g, candidate_edges=len(s.edges), attention_entropy=h)
                for a, g, s, h in zip(answers, routed, samples, entropy, strict=True)]


def _routed_entropy(out: RouterOutput, max_hops: int) -> list[list[float]]:
    """Per routed question, the entropy of each hop it asks for (``out.stop``'s hop count, as
    :meth:`~factloom.model.router.RelationRouter.plan` reads it; every hop up to ``max_hops``
    for routers without one) over the relations of its candidate graph."""
    assert out.logits is not None
    per_hop = relation_entropy(out.logits).cpu()  # (B, T)
    hops = min(max_hops, per_hop.shape[1])
    if out.stop is None:
        return [row[:hops].tolist() for row in per_hop]
    needed = out.stop.float().flip(-1).cumsum(-1).flip(-1).cpu()  # (B, T): P(t + 1 hops or more)
    depth = [max(1, min(hops, int((n >= PLAN_MIN_HOP_MASS).sum()))) for n in needed]
    return [row[:d].tolist() for row, d in zip(per_hop, depth, strict=True)]


def _question_key(qvec: npt.NDArray[np.float32], qtok: npt.NDArray[np.float32] | None) -> bytes:
    """A digest of what the models read of a question: the same phrasing, the same key."""
    digest = hashlib.blake2b(np.ascontiguousarray(qvec).tobytes(), digest_size=16)
    if qtok is not None:
        digest.update(np.ascontiguousarray(qtok).tobytes())
    return digest.digest()


def _with_edges(s: Sample, g: Subgraph) -> Sample:
    graph = Subgraph(seeds=[], names=s.names, edges=g.edges)
    from factloom.graph.types import Seed

    graph.seeds = [Seed(s.nodes[i], s.names.get(s.nodes[i], s.nodes[i]), 1.0, "exact") for i in s.seeds]
    return make_sample(s.question, s.qvec, graph, qtok=s.qtok)


def _split(x: torch.Tensor, offsets: list[int]) -> list[torch.Tensor]:
    return [x[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def _to(c: Any, device: str) -> Any:
    if device != "cpu":
        c.batch = c.batch.to(device)
        c.rel_feat = c.rel_feat.to(device)
        c.qvec = c.qvec.to(device)
        c.qtok = c.qtok.to(device)
        c.qmask = c.qmask.to(device)
        c.gold = c.gold.to(device)
    return c
