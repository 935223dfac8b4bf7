"""The learned query path of one API process: the active router / reasoner per kb, loaded from the
model registry by version, and one dynamic batcher that every request thread shares.

A batch runs retrieval and the models together: the questions are encoded in one sentence-model
pass, the router plans each question's relations per hop from the question alone, the store is
asked twice per hop for all the batch's questions (the relations around each frontier, then the
facts along the chosen ones), and the reasoner reads the result. Routers that cannot plan, and
questions whose planned relations lead nowhere, get the plain k-hop candidates and the router's
selection."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.graph.retrieval import guided_subgraphs, k_hop_subgraph, kb_predicates
from factloom.graph.store import check_kb
from factloom.graph.types import Seed, Subgraph
from factloom.learn.serving import Recorder
from factloom.ledger import Database, Trial, active_versions, trial_versions
from factloom.metrics import ROUTER_ENTROPY
from factloom.model.batching import DynamicBatcher, Overloaded
from factloom.model.embedder import Embedder, resolve_device
from factloom.model.features import RelationFeatures, make_sample, questions_inputs
from factloom.model.pipeline import LearnedPipeline, Result, load_model
from factloom.model.precision import PrecisionPolicy
from factloom.model.reasoner import PathReasoner
from factloom.model.router import RelationRouter
from factloom.model.verbaliser import Verbaliser

__all__ = ["QueryEngine", "get_engine", "get_verbaliser", "Loaded", "Answered", "OnTrial"]

log = logging.getLogger(__name__)
# how long a registry lookup is trusted: a promoted version serves within this many seconds
_REGISTRY_TTL_S = 5.0
# how long a kb's predicate list (the router's planning vocabulary) is trusted
_PREDICATES_TTL_S = 30.0


@dataclass
class Loaded:
    router_version: str | None
    reasoner_version: str
    pipeline: LearnedPipeline

    @property
    def versions(self) -> tuple[str, ...]:
        """The registry versions that answer with these models (the figures are kept per version)."""
        return (self.reasoner_version,) if self.router_version is None else (self.router_version,
                                                                             self.reasoner_version)


@dataclass
class OnTrial:
    """A kb's version on trial and the models it answers with: the active ones, its kind swapped."""

    trial: Trial
    loaded: Loaded


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


class _Pending:
    """The models asked for are loading on a thread of their own."""


_PENDING = _Pending()


class _NotLoaded(ValueError):
    def __init__(self, version: str, why: str) -> None:
        super().__init__(why)
        self.version = version


M = TypeVar("M")


def _load_version(version: tuple[str, str], kind: type[M]) -> M:
    """The model of a registry ``(version, artefact)``, which must be a ``kind``; :class:`_NotLoaded`
    names the version whose artefact is missing, corrupt or of another kind."""
    from pathlib import Path

    try:
        model = load_model(Path(version[1]))
    except Exception as exc:
        raise _NotLoaded(version[0], f"{version[1]}: {exc}") from exc
    if not isinstance(model, kind):
        raise _NotLoaded(version[0], f"{version[1]} holds a {type(model).__name__}, not a {kind.__name__}")
    return model


class QueryEngine:
    def __init__(self, settings: Settings, db: Database, embedder: Embedder, figures: Recorder | None = None) -> None:
        self.settings = settings
        self.db = db
        self.figures = figures  # per-version serving figures (None: not kept, as in offline benchmarks)
        self.device = resolve_device(settings.device)
        self.embedder = embedder
        self.features = RelationFeatures(embedder.encode)
        self._lock = threading.Lock()
        self._looked_up: dict[str, tuple[float, Loaded | None, OnTrial | None]] = {}
        self._loaded: dict[tuple[str | None, str], Loaded] = {}
        # versions whose artefacts did not load: why, and which of them failed
        self._failed: dict[tuple[str | None, str], tuple[str, tuple[str, ...]]] = {}
        self._loading: set[tuple[str | None, str]] = set()  # versions loading on a thread of their own
        # kb → why its active versions are not loaded, and which versions those are
        self._errors: dict[str, tuple[str, tuple[str, ...]] | None] = {}
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
        """The active learned models for ``kb``, or ``None`` when no reasoner was trained for it or its
        artefacts did not load (:meth:`load_error` says why)."""
        return self._look_up(kb)[0]

    def on_trial(self, kb: str) -> OnTrial | None:
        """The version of ``kb`` on trial (shadow or A/B) with the models it answers with, or ``None``
        when none is, no active models serve the kb, or the trial's artefact did not load."""
        return self._look_up(kb)[1]

    def _look_up(self, kb: str) -> tuple[Loaded | None, OnTrial | None]:
        """The kb's active and trial models, from a registry read at most every few seconds. A new
        version loads on a thread of its own while the one before keeps answering (the kb's first
        version, with nothing to answer meanwhile, loads at once)."""
        now = time.monotonic()
        with self._lock:
            hit = self._looked_up.get(kb)
            if hit and now - hit[0] < _REGISTRY_TTL_S:
                return hit[1], hit[2]
            kinds = ("router", "reasoner")
            active = active_versions(self.db, kinds)
            versions = {kind: active.get((kind, kb)) for kind in kinds}
            serving = hit[1] if hit else None
            loaded, self._errors[kb] = self._get(versions, wait=serving is None), None
            pending = loaded is _PENDING
            if isinstance(loaded, _Pending):
                loaded = serving
            elif versions["reasoner"] is not None and loaded is None:
                self._errors[kb] = self._failed[self._key(versions)]
            on_trial = None
            trials = trial_versions(self.db, kinds)
            for kind in kinds:
                trial = trials.get((kind, kb))
                if loaded is not None and trial is not None:
                    swapped = self._get({**versions, kind: (trial.version, trial.artefact)}, wait=False)
                    pending = pending or swapped is _PENDING
                    on_trial = OnTrial(trial, swapped) if isinstance(swapped, Loaded) else None
                    break
            # while a version loads, look again shortly rather than after the whole TTL
            self._looked_up[kb] = (now - _REGISTRY_TTL_S + 0.25 if pending else now, loaded, on_trial)
            return loaded, on_trial

    @staticmethod
    def _key(versions: dict[str, tuple[str, str] | None]) -> tuple[str | None, str]:
        reasoner = versions["reasoner"]
        assert reasoner is not None
        return (versions["router"][0] if versions["router"] else None, reasoner[0])

    def _get(self, versions: dict[str, tuple[str, str] | None], *, wait: bool) -> Loaded | _Pending | None:
        """The models of ``versions``, loaded once; ``None`` without a reasoner or when they did not
        load; :data:`_PENDING` while they load on a thread of their own (``wait=False``)."""
        if versions["reasoner"] is None:
            return None
        key = self._key(versions)
        if key in self._loaded or key in self._failed:
            return self._loaded.get(key)
        if wait:
            self._load_into(key, versions)
            return self._loaded.get(key)
        if key not in self._loading:
            self._loading.add(key)
            threading.Thread(target=self._load_into, args=(key, versions, True), name="query-model-load",
                             daemon=True).start()
        return _PENDING

    def _load_into(self, key: tuple[str | None, str], versions: dict[str, tuple[str, str] | None],
                   background: bool = False) -> None:
        try:
            loaded = self._load(versions)
        except Exception as exc:  # a missing or corrupt artefact: the kb falls back, once logged
            log.exception("the models reasoner %s, router %s did not load", key[1], key[0])
            broken = exc.version if isinstance(exc, _NotLoaded) else None
            failed = (f"reasoner {key[1]}, router {key[0]}: {exc}",
                      (broken,) if broken else tuple(v for v in key if v is not None))
            with self._lock if background else contextlib.nullcontext():
                self._failed[key] = failed
                self._loading.discard(key)
            return
        with self._lock if background else contextlib.nullcontext():
            self._loaded[key] = loaded
            self._loading.discard(key)

    def load_error(self, kb: str) -> str | None:
        """Why the kb's active learned models are not loaded, when they failed to (as of the last
        :meth:`learned`); ``None`` when they loaded or none are registered."""
        error = self._errors.get(kb)
        return error[0] if error else None

    def failed_versions(self, kb: str) -> tuple[str, ...]:
        """The active versions of ``kb`` that did not load (as of the last :meth:`learned`)."""
        error = self._errors.get(kb)
        return error[1] if error else ()

    def _load(self, versions: dict[str, tuple[str, str] | None]) -> Loaded:
        reasoner_v = versions["reasoner"]
        assert reasoner_v is not None
        reasoner = _load_version(reasoner_v, PathReasoner)
        router = _load_version(versions["router"], RelationRouter) if versions["router"] else None
        policy = PrecisionPolicy(device=self.device, mode=self.settings.query_precision)
        log.info("loaded reasoner %s, router %s", reasoner_v[0], versions["router"])
        return Loaded(router_version=versions["router"][0] if versions["router"] else None,
                      reasoner_version=reasoner_v[0],
                      pipeline=LearnedPipeline(router, reasoner, self.features, policy, device=self.device,
                                               question_cache=self.settings.query_question_cache))

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
