"""Answering a question: link → retrieve the candidate subgraph → route → reason.

Blocking throughout (Neo4j driver, the model): the route is a plain ``def``, so FastAPI runs it in
its threadpool and the event loop stays free. With learned models, retrieval and the models run on
the engine's batcher thread, so concurrent questions share one model call and the store round trips
of each hop; the ``retrieve`` timing is then that batch's retrieval.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from datetime import datetime

from factloom.graph import InvalidGraphInput, Neo4jStore
from factloom.graph.errors import GraphUnavailable
from factloom.graph.linking import bracketed_mentions, link_entities
from factloom.graph.retrieval import k_hop_subgraph
from factloom.learn.serving import Recorder, in_ab
from factloom.ledger import active_versions
from factloom.model.batching import Overloaded
from factloom.model.embedder import Embedder
from factloom.model.pathrank import GENERIC_INVERSE, Answer, PathRankReasoner
from factloom.model.verbaliser import Verbaliser
from factloom.platform.errors import BadRequest, Conflict, NotFound, TooManyRequests, Unavailable
from factloom.platform.query.engine import QueryEngine, get_engine
from factloom.platform.query.schemas import (
    AnswerOut,
    ModelVersions,
    PathStepOut,
    QueryOut,
    SeedOut,
    SubgraphOut,
    Timings,
)
from factloom.platform.resources import Resources
from factloom.runtime import settle_heap

__all__ = ["answer", "warm_up"]

log = logging.getLogger(__name__)

SEED_LIMIT = 3


def answer(
    *, store: Neo4jStore, embedder: Embedder, kb: str, question: str, top_k: int,
    max_hops: int | None, as_of: datetime | None, hops_limit: int, max_edges: int,
    engine: QueryEngine | None = None, reasoner: str | None = None, default_reasoner: str = "auto",
    include_subgraph: bool = False, verbaliser: Verbaliser | None = None, client_id: str | None = None,
    inverse_template: str | None = None,
) -> QueryOut:
    """Answer ``question`` over ``kb``; no linked entity is a normal, empty answer with a note, unless
    ``kb`` holds no entity at all (:class:`NotFound`: most likely a misspelt name).

    ``max_hops`` is the asker's bound, capped by the server's ``hops_limit``. ``reasoner``
    (``learned`` | ``baseline`` | ``None``: ``default_reasoner``, where ``auto`` means learned when
    the registry holds a reasoner for ``kb``) picks the model.

    A version of the kb on trial answers instead of the active one for the asker ``client_id`` (an
    API key's id) when it is in the trial's A/B share, or answers beside it, unseen, as a shadow.
    Each learned answer is counted against the versions that gave it (:mod:`factloom.learn.serving`).
    """
    hops = min(max_hops or hops_limit, hops_limit)
    choice = reasoner or default_reasoner
    loaded = engine.learned(kb) if engine is not None and choice in ("learned", "auto") else None
    failed = engine.load_error(kb) if engine is not None and loaded is None and choice != "baseline" else None
    on_trial = engine.on_trial(kb) if engine is not None and loaded is not None else None
    role = "active"
    if on_trial is not None and on_trial.trial.mode == "ab" and client_id is not None \
            and in_ab(client_id, on_trial.trial.version, on_trial.trial.share):
        loaded, role = on_trial.loaded, "ab"
    figures = engine.figures if engine is not None else None
    if failed and figures is not None and engine is not None:
        # the broken active versions fail every question they get
        figures.answered(kb, engine.failed_versions(kb), "active", 0.0, ok=False)
    if choice == "learned" and loaded is None:
        if failed:
            raise Unavailable(f"the active learned models of kb {kb!r} did not load ({failed}); activate "
                              f"another version ('factloom models activate') or ask with reasoner=baseline")
        raise Conflict(f"no learned reasoner is registered for kb {kb!r}; train one with "
                       f"'factloom train reasoner' or ask with reasoner=baseline")
    # the baseline words an inverse hop with the kb's own noun where one is set ("movies with …")
    baseline = None if loaded is not None else PathRankReasoner(
        embedder.encode, inverse_template=inverse_template or GENERIC_INVERSE)
    versions = ModelVersions(
        embedder=embedder.version,
        reasoner=loaded.reasoner_version if loaded else PathRankReasoner.version,
        router=loaded.router_version if loaded else None,
        precision=dict(loaded.pipeline.policy.chosen) if loaded else {},
    )
    t0 = time.perf_counter()
    with _as_problems():
        # with bracketed names the vector step never runs, so skip the embedding
        vector = None if bracketed_mentions(question) else embedder.embed([question])[0]
        seeds = link_entities(store, kb=kb, question=question, vector=vector, limit=SEED_LIMIT)
    t1 = time.perf_counter()
    if not seeds:
        with _as_problems():
            exists = store.has_entities(kb)
        if not exists:
            raise NotFound(f"knowledge base {kb!r} holds no entities: check its name (a kb appears with "
                           f"its first committed fact)")
        return QueryOut(
            answers=[], seeds=[], model_versions=versions,
            timings_ms=_timings(t0, t1, t1, t1),
            note="no entity of the question could be linked to the knowledge base; "
                 "put names in [brackets] to link them exactly",
        )
    answers: list[Answer]
    if loaded is not None and engine is not None:
        with _as_problems(), _counted(figures, kb, loaded.versions, role):
            # retrieval runs in the engine's batch, guided by the router (see engine.QueryEngine)
            answered = engine.run(loaded, question, seeds, store=store, kb=kb, max_hops=hops, max_edges=max_edges,
                                  as_of=as_of, top_k=top_k)
        graph, answers, routed = answered.candidates, answered.result.answers, answered.result.routed
        if on_trial is not None and on_trial.trial.mode == "shadow":
            engine.shadow(on_trial, question, seeds, store=store, kb=kb, max_hops=hops, max_edges=max_edges,
                          as_of=as_of, top_k=top_k, active_top=answers[0].entity_id if answers else None)
        t2 = t1 + answered.retrieve_ms / 1000.0
        versions.precision = {**engine.encoder_policy.chosen, **loaded.pipeline.policy.chosen}
    else:
        with _as_problems():
            graph = k_hop_subgraph(store, kb=kb, seeds=seeds, hops=hops, max_edges=max_edges, as_of=as_of)
        t2 = time.perf_counter()
        assert baseline is not None
        answers = baseline.answer(question, graph, top_k=top_k, max_hops=hops)
        routed = graph
    t3 = time.perf_counter()
    subgraph = SubgraphOut(candidate_edges=len(graph.edges), routed_edges=len(routed.edges))
    if include_subgraph:
        subgraph.candidate_entities = sorted({graph.names.get(n, n) for e in graph.edges
                                              for n in (e.source_id, e.target_id)})
        subgraph.routed_entities = sorted({graph.names.get(n, n) for e in routed.edges
                                           for n in (e.source_id, e.target_id)})
    return QueryOut(
        answers=[
            AnswerOut(
                entity_id=a.entity_id, name=a.name, score=a.score,
                paths=[[PathStepOut(fact_id=s.fact_id, subject=s.subject, predicate=s.predicate,
                                    object=s.object, sources=list(s.sources)) for s in path]
                       for path in a.paths],
            )
            for a in answers
        ],
        seeds=[SeedOut(entity_id=s.entity_id, name=s.name, score=s.score, how=s.how) for s in seeds],
        timings_ms=_timings(t0, t1, t2, t3),
        model_versions=versions,
        truncated=graph.truncated,
        subgraph=subgraph,
        sentence=verbaliser.sentence(question, answers[0]) if verbaliser is not None and answers else None,
        note=("the kb's learned models did not load, so the training-free baseline answered" if failed else
              None if answers else f"no current facts lead from the linked entities within {hops} hops"),
    )


def warm_up(resources: Resources) -> dict[str, float]:
    """Load now what a new API process would otherwise load on its first question: the sentence
    model and, for each kb with a learned reasoner, its models, then answer one question about a
    fact of that kb, which checks each operation's precision against fp32. Returns the seconds each
    took ("" for the sentence model). A failure is logged, not raised: a cold process still answers,
    only its first question is slow."""
    took: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        settings, embedder = resources.settings, resources.embedder
        engine = get_engine(settings, resources.db, embedder, resources.figures)
        took[""] = time.perf_counter() - t0
        kbs = sorted(kb for _, kb in active_versions(resources.db, ("reasoner",)))
    except Exception:
        log.warning("warming the query models up failed; they load on the first question", exc_info=True)
        return took
    for kb in kbs:
        t0 = time.perf_counter()
        try:
            fact = resources.store.some_fact(kb)
            if fact is None:
                continue
            subject, predicate = fact
            answer(store=resources.store, embedder=embedder, kb=kb, top_k=1, max_hops=None, as_of=None,
                   question=f"{predicate.replace('_', ' ')} [{subject}]",  # e.g. "directed by [Blade Runner]"
                   hops_limit=settings.query_max_hops, max_edges=settings.query_max_edges, engine=engine,
                   reasoner="learned")
            took[kb] = time.perf_counter() - t0
        except Exception:
            log.warning("warming kb %r's query models up failed; they load on its first question", kb, exc_info=True)
    frozen = settle_heap()  # the models stay for the process's life: out of the collector's way
    log.info("query models warm: %s; %d objects frozen out of garbage collection",
             ", ".join(f"{kb or 'sentence model'} {s:.1f} s" for kb, s in took.items()), frozen)
    return took


@contextlib.contextmanager
def _counted(figures: Recorder | None, kb: str, versions: Sequence[str], role: str) -> Iterator[None]:
    """Count the answer against ``versions`` in ``role``: its latency, and whether it failed (a
    question turned away because too many wait is no answer, and not counted)."""
    t0 = time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    except Overloaded:
        figures = None
        raise
    finally:
        if figures is not None:
            figures.answered(kb, versions, role, (time.perf_counter() - t0) * 1000, ok=ok)


@contextlib.contextmanager
def _as_problems() -> Iterator[None]:
    """The store's and the batcher's errors as the platform's (400, 503, 429)."""
    try:
        yield
    except InvalidGraphInput as exc:
        raise BadRequest(str(exc)) from exc
    except GraphUnavailable as exc:
        raise Unavailable(str(exc)) from exc
    except Overloaded as exc:
        raise TooManyRequests(f"the query API is at capacity ({exc}); try again shortly", retry_after=1) from exc


def _timings(t0: float, t1: float, t2: float, t3: float) -> Timings:
    ms = 1000.0
    return Timings(
        link=round((t1 - t0) * ms, 2), retrieve=round((t2 - t1) * ms, 2),
        reason=round((t3 - t2) * ms, 2), total=round((t3 - t0) * ms, 2),
    )
