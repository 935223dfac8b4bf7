"""The learned query path of one API process: one dynamic batcher that every request thread shares,
answering with the active router / reasoner of each kb (:mod:`.registry` looks them up and loads them).

A batch runs retrieval and the models together: the questions are encoded in one sentence-model
pass, the router plans each question's relations per hop from the question alone, the store is
asked twice per hop for all the batch's questions (the relations around each frontier, then the
facts along the chosen ones), and the reasoner reads the result. Routers that cannot plan, and
questions whose planned relations lead nowhere, get the plain k-hop candidates and the router's
selection. A version in shadow answers again later, on a thread of its own, when no question waits."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.graph.retrieval import guided_subgraphs, k_hop_subgraph, kb_predicates
from factloom.graph.store import check_kb
from factloom.graph.types import Seed, Subgraph
from factloom.learn.serving import Recorder
from factloom.ledger import Database
from factloom.metrics import ROUTER_ENTROPY
from factloom.model.batching import DynamicBatcher, Overloaded
from factloom.model.embedder import Embedder, resolve_device
from factloom.model.features import RelationFeatures, make_sample, questions_inputs
from factloom.model.pipeline import Result
from factloom.model.precision import PrecisionPolicy
from factloom.model.verbaliser import Verbaliser
from factloom.platform.query.registry import Loaded, OnTrial, QueryModels

__all__ = ["QueryEngine", "get_engine", "get_verbaliser", "Answered"]

log = logging.getLogger(__name__)
# how long a kb's predicate list (the router's planning vocabulary) is trusted
_PREDICATES_TTL_S = 30.0


@dataclass
class Answered:
    result: Result
    candidates: Subgraph  # what retrieval returned (router-guided, or k-hop)
    retrieve_ms: float  # the batch's retrieval time


@dataclass
class _Shadow:
    on_trial: OnTrial
    kb: str
    question: str
    seeds: list[Seed]
    store: Neo4jStore
    max_hops: int
    max_edges: int
    as_of: datetime | None
    top_k: int
    active_top: str | None  # the entity id the active version ranked first


@dataclass
class _Job:
    loaded: Loaded
    question: str
    seeds: list[Seed]
    store: Neo4jStore
    kb: str
    max_hops: int
    max_edges: int
    as_of: datetime | None
    top_k: int


class QueryEngine:
    def __init__(self, settings: Settings, db: Database, embedder: Embedder, figures: Recorder | None = None) -> None:
        self.settings = settings
        self.db = db
        self.figures = figures  # per-version serving figures (None: not kept, as in offline benchmarks)
        self.device = resolve_device(settings.device)
        self.embedder = embedder
        self.features = RelationFeatures(embedder.encode)
        self.models = QueryModels(settings, db, self.features, self.device)
        self._lock = threading.Lock()  # the shadow's counters and thread
        # shadow questions wait here for the shadow thread; a full line skips them (counted)
        self._shadows: queue.Queue[_Shadow] = queue.Queue(maxsize=max(1, settings.shadow_max_waiting))
        self.shadow_skipped = 0
        self._shadow_seen = self._shadow_taken = 0  # questions offered to the shadow, and those it answers
        self._shadow_thread: threading.Thread | None = None
        self._predicates: dict[tuple[int, str], tuple[float, list[str]]] = {}
        # the question encoder is the process's, shared by every kb: its precision is checked once
        self.encoder_policy = PrecisionPolicy(device=self.device, mode=settings.query_precision)
        self._encoder_check = threading.Lock()
        self.batcher: DynamicBatcher[_Job, Answered] = DynamicBatcher(
            self._run_batch, max_batch=settings.query_batch_max, window_ms=settings.query_batch_window_ms,
            name="query-batcher", workers=settings.query_batch_workers, max_waiting=settings.query_max_waiting,
        )

    def learned(self, kb: str) -> Loaded | None:
        """The active learned models for ``kb`` (:meth:`QueryModels.learned`)."""
        return self.models.learned(kb)

    def on_trial(self, kb: str) -> OnTrial | None:
        """The version of ``kb`` on trial and the models it answers with (:meth:`QueryModels.on_trial`)."""
        return self.models.on_trial(kb)

    def load_error(self, kb: str) -> str | None:
        """Why the kb's active learned models are not loaded (:meth:`QueryModels.load_error`)."""
        return self.models.load_error(kb)

    def failed_versions(self, kb: str) -> tuple[str, ...]:
        """The active versions of ``kb`` that did not load (:meth:`QueryModels.failed_versions`)."""
        return self.models.failed_versions(kb)

    def run(self, loaded: Loaded, question: str, seeds: Sequence[Seed], *, store: Neo4jStore, kb: str,
            max_hops: int, max_edges: int, as_of: datetime | None, top_k: int) -> Answered:
        """Retrieve and answer one question from its linked ``seeds`` (on the batcher's thread)."""
        check_kb(kb)  # a bad kb must fail this caller, not the batch it would join
        return self.batcher.submit(_Job(loaded, question, list(seeds), store, kb, max_hops, max_edges, as_of, top_k))

    def shadow(self, on_trial: OnTrial, question: str, seeds: Sequence[Seed], *, store: Neo4jStore, kb: str,
               max_hops: int, max_edges: int, as_of: datetime | None, top_k: int, active_top: str | None) -> None:
        """Answer the question again with the shadow version, later, on the shadow thread: its
        latency and whether its top answer is the active one's are recorded, its answer dropped.
        Only every 1/``shadow_sample``-th question is answered again, and only when no question
        waits for the batcher then: the shadow runs on capacity the answers do not need."""
        with self._lock:
            self._shadow_seen += 1
            if self._shadow_seen * self.settings.shadow_sample < self._shadow_taken + 1:
                return
            self._shadow_taken += 1
        try:
            self._shadows.put_nowait(_Shadow(on_trial, kb, question, list(seeds), store, max_hops, max_edges, as_of,
                                             top_k, active_top))
        except queue.Full:
            self.shadow_skipped += 1
            return
        with self._lock:
            if self._shadow_thread is None:
                self._shadow_thread = threading.Thread(target=self._shadow_loop, name="query-shadow", daemon=True)
                self._shadow_thread.start()

    def _shadow_loop(self) -> None:
        while True:
            job = self._shadows.get()
            version = job.on_trial.trial.version
            if self.batcher.waiting:
                self.shadow_skipped += 1  # questions wait for an answer: the shadow gives way to them
                continue
            t0 = time.perf_counter()
            try:
                answered = self.run(job.on_trial.loaded, job.question, job.seeds, store=job.store, kb=job.kb,
                                    max_hops=job.max_hops, max_edges=job.max_edges, as_of=job.as_of, top_k=job.top_k)
            except Overloaded:
                self.shadow_skipped += 1  # the active questions come first
                continue
            except Exception:
                log.warning("shadow version %s failed on a question of kb %s", version, job.kb, exc_info=True)
                if self.figures is not None:
                    self.figures.answered(job.kb, [version], "shadow", (time.perf_counter() - t0) * 1000, ok=False)
                continue
            if self.figures is not None:
                answers = answered.result.answers
                self.figures.answered(job.kb, [version], "shadow", (time.perf_counter() - t0) * 1000)
                self.figures.compared(job.kb, version,
                                      agreed=(answers[0].entity_id if answers else None) == job.active_top)

    def predicates(self, store: Neo4jStore, kb: str) -> list[str]:
        key, now = (id(store), kb), time.monotonic()
        hit = self._predicates.get(key)
        if hit is None or now - hit[0] >= _PREDICATES_TTL_S:
            hit = self._predicates[key] = (now, kb_predicates(store, kb))
        return hit[1]

    def _retrieve(self, jobs: Sequence[_Job],
                  encoded: Sequence[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]],
                  ) -> tuple[list[Subgraph], list[bool]]:
        """Each job's graph, and whether it came from the router's plan (else: k-hop candidates)."""
        graphs: list[Subgraph | None] = [None] * len(jobs)
        groups: dict[tuple[int, int, str, datetime | None, int, int], list[int]] = {}
        for i, j in enumerate(jobs):
            groups.setdefault((id(j.loaded), id(j.store), j.kb, j.as_of, j.max_hops, j.max_edges), []).append(i)
        for members in groups.values():
            j0 = jobs[members[0]]
            pipeline = j0.loaded.pipeline
            if self.settings.query_retrieval == "guided" and pipeline.can_plan:
                plan = pipeline.plan([encoded[i][0] for i in members], [encoded[i][1] for i in members],
                                     self.predicates(j0.store, j0.kb), max_hops=j0.max_hops)
                found = guided_subgraphs(j0.store, kb=j0.kb, seeds=[jobs[i].seeds for i in members], choose=plan.choose,
                                         guess=plan.guess, hops=plan.depth, max_edges=j0.max_edges, as_of=j0.as_of)
                for i, g in zip(members, found, strict=True):
                    graphs[i] = g if g.edges else None
        planned = [g is not None for g in graphs]
        out = [g if g is not None else k_hop_subgraph(j.store, kb=j.kb, seeds=j.seeds, hops=j.max_hops,
                                                      max_edges=j.max_edges, as_of=j.as_of)
               for g, j in zip(graphs, jobs, strict=True)]
        return out, planned

    def encode(self, questions: Sequence[str], mentions: Sequence[Sequence[str]],
               ) -> list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]]:
        """The questions' sentence and token embeddings in one encoder pass, in the precision the
        first batch chose (bf16 when it matches fp32 within the policy's relative tolerance)."""
        policy = self.encoder_policy
        with self._encoder_check:  # the first batch checks it, while any other batch worker waits
            if "encoder" not in policy.chosen:
                import torch

                def run(precision: str = "fp32") -> list[torch.Tensor]:  # uncached: the policy times it
                    return [torch.from_numpy(np.concatenate([v[None, :], t]))
                            for v, t in questions_inputs(self.embedder, questions, mentions, precision, cache=False)]

                policy.calibrate("encoder", run, run_low=run, vectors=True)
        return questions_inputs(self.embedder, questions, mentions, policy.dtype_name("encoder"))

    def _run_batch(self, jobs: Sequence[_Job]) -> list[Answered]:
        # the batch's questions share one sentence-model pass (8 questions: ~3x cheaper than one by one)
        encoded = self.encode([j.question for j in jobs], [[s.name for s in j.seeds] for j in jobs])
        t0 = time.perf_counter()
        graphs, planned = self._retrieve(jobs, encoded)
        retrieve_ms = (time.perf_counter() - t0) * 1000
        samples = [make_sample(j.question, qvec, g, qtok=qtok)
                   for j, g, (qvec, qtok) in zip(jobs, graphs, encoded, strict=True)]
        results: dict[int, Result] = {}
        groups: dict[tuple[int, int], list[int]] = {}
        for i, job in enumerate(jobs):
            groups.setdefault((id(job.loaded), job.max_hops), []).append(i)
        for (_, hops), members in groups.items():
            pipeline = jobs[members[0]].loaded.pipeline
            top_k = max(jobs[i].top_k for i in members)
            out = pipeline.run([samples[i] for i in members], top_k=top_k, max_hops=hops,
                               planned=[planned[i] for i in members])
            for i, result in zip(members, out, strict=True):
                result.answers = result.answers[: jobs[i].top_k]
                results[i] = result
                for hop, entropy in enumerate(result.attention_entropy, start=1):
                    ROUTER_ENTROPY.labels(hop=str(hop)).observe(entropy)
        return [Answered(results[i], graphs[i], retrieve_ms) for i in range(len(jobs))]


_engines: dict[int, QueryEngine] = {}
_engines_lock = threading.Lock()


def get_engine(settings: Settings, db: Database, embedder: Embedder, figures: Recorder | None = None) -> QueryEngine:
    """One engine per process and ledger (tests open several platforms in one process); ``figures``
    keeps the per-version serving figures of the first caller's engine."""
    key = id(db)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = QueryEngine(settings, db, embedder, figures)
        return engine


_verbalisers: dict[str, Verbaliser] = {}


def get_verbaliser(settings: Settings) -> Verbaliser | None:
    """The configured verbaliser, loaded once per process; ``None`` when none is configured."""
    path = settings.query_verbaliser_path
    if not path:
        return None
    with _engines_lock:
        if path not in _verbalisers:
            _verbalisers[path] = Verbaliser(path, device=resolve_device(settings.device))
        return _verbalisers[path]
