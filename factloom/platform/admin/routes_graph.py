"""The graph explorer, the neighbourhood endpoint the graph canvases expand with, the Ask page and the
✓ / ✗ feedback on its answers."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Form, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from factloom.config import DEFAULT_KB
from factloom.graph.explore import entity_facts, get_entity, neighbourhood, relation_page, search_entities
from factloom.graph.store import check_kb
from factloom.platform.admin.auth import AdminSession, Reviewer
from factloom.platform.admin.batches import knowledge_bases
from factloom.platform.admin.render import PREFIX, AdminRoute, flash, redirect, render
from factloom.platform.admin.visuals import answer_elements, neighbourhood_elements
from factloom.platform.deps import ResourcesDep
from factloom.platform.errors import BadRequest, PlatformError, found
from factloom.platform.feedback import service as feedback_service
from factloom.platform.feedback.schemas import FeedbackItem
from factloom.platform.query import service as query_service
from factloom.platform.query.engine import get_engine, get_verbaliser
from factloom.platform.query.paths import walk
from factloom.platform.resources import Resources

__all__ = ["router", "parse_as_of"]

router = APIRouter(prefix=PREFIX, route_class=AdminRoute, include_in_schema=False)

# neighbours drawn around one entity before its relations are summarised ("+212 more"), and per
# click on a summary: more than this around one node is a heap of labels, not a picture
NEIGHBOURS = 25
# supporting paths written out under each answer (the graph draws them all)
PATHS_SHOWN = 3


def parse_as_of(raw: str | None) -> datetime | None:
    """A date (end of that day, UTC) or a datetime from a form field; empty: now."""
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        if len(raw) == 10:
            return datetime.combine(date.fromisoformat(raw), time(23, 59, 59), tzinfo=UTC)
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise BadRequest(f"'as of' must be a date like 2020-01-31, not {raw!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _kb(raw: str | None) -> str:
    try:
        return check_kb((raw or DEFAULT_KB).strip())
    except Exception as exc:
        raise BadRequest(str(exc)) from None


@router.get("/graph")
def explorer(request: Request, _: Reviewer, resources: ResourcesDep, kb: str = DEFAULT_KB, q: str = "") -> Response:
    kb = _kb(kb)
    hits = search_entities(resources.store, kb=kb, text=q[:200], limit=30) if q.strip() else []
    return render(request, "graph.html", kb=kb, q=q, hits=hits, kbs=knowledge_bases(db=resources.db))


@router.get("/graph/entity/{entity_id}")
def entity_page(
    entity_id: str, request: Request, _: Reviewer, resources: ResourcesDep, kb: str = DEFAULT_KB,
    as_of: str = "", history: str = "",
) -> Response:
    kb = _kb(kb)
    at = parse_as_of(as_of)
    entity = found(get_entity(resources.store, kb=kb, entity_id=entity_id),
                   f"entity {entity_id} in knowledge base {kb!r}")
    facts = entity_facts(resources.store, kb=kb, entity_id=entity_id, as_of=at, history=bool(history))
    graph = neighbourhood(resources.store, kb=kb, entity_ids=[entity_id], as_of=at, per_node=NEIGHBOURS)
    by_predicate: dict[tuple[str, bool], list[Any]] = {}
    for fact in facts:
        by_predicate.setdefault((fact.predicate, fact.outgoing), []).append(fact)
    return render(request, "entity.html", kb=kb, entity=entity, groups=by_predicate, facts=facts,
                  as_of=as_of, history=bool(history), elements=neighbourhood_elements(graph, focus=[entity_id]),
                  truncated=graph.truncated, kbs=knowledge_bases(db=resources.db))


@router.get("/api/graph/expand")
def expand(
    _: Reviewer, resources: ResourcesDep, id: Annotated[list[str], Query(max_length=20)],
    kb: str = DEFAULT_KB, as_of: str = "", predicate: str = "", outgoing: bool = True, skip: int = 0,
) -> JSONResponse:
    """One hop around the given entities, as Cytoscape elements, for a click on a node; with a
    ``predicate``, the next page of that relation of the one entity, for a click on its "+N more"."""
    kb, at = _kb(kb), parse_as_of(as_of)
    if predicate:
        if len(id) != 1:
            raise BadRequest("a relation's next page is of one entity")
        graph = relation_page(resources.store, kb=kb, entity_id=id[0], predicate=predicate, outgoing=outgoing,
                              skip=skip, as_of=at, take=NEIGHBOURS)
        return JSONResponse({"elements": neighbourhood_elements(graph), "truncated": graph.truncated})
    graph = neighbourhood(resources.store, kb=kb, entity_ids=id, as_of=at, per_node=NEIGHBOURS)
    return JSONResponse({"elements": neighbourhood_elements(graph, expanded=id), "truncated": graph.truncated})


@router.get("/ask")
def ask(
    request: Request, _: Reviewer, resources: ResourcesDep, question: str = "", kb: str = DEFAULT_KB,
    as_of: str = "", hops: int = 0, top_k: int = 5,
) -> Response:
    kb = _kb(kb)
    result, error = None, None
    question = question.strip()[:1000]
    if question:
        settings = resources.settings
        engine = None if settings.query_reasoner == "baseline" else \
            get_engine(settings, resources.db, resources.embedder, resources.figures)
        try:
            result = query_service.answer(
                store=resources.store, embedder=resources.embedder, kb=kb, question=question,
                top_k=max(1, min(top_k, 20)), max_hops=hops if 1 <= hops <= 3 else None, as_of=parse_as_of(as_of),
                hops_limit=settings.query_max_hops, max_edges=settings.query_max_edges, engine=engine,
                default_reasoner=settings.query_reasoner, verbaliser=get_verbaliser(settings),
                inverse_template=settings.inverse_template(kb),
            )
        except PlatformError as exc:
            error = exc.detail
    seeds = [s.name for s in result.seeds] if result else []
    elements = answer_elements(result.answers, seeds) if result else []
    # each answer's first paths as walked from the linked entity, every step naming where it arrives
    paths = [[walk(p, seeds) for p in a.paths[:PATHS_SHOWN]] for a in result.answers] if result else []
    return render(request, "ask.html", question=question, kb=kb, as_of=as_of, hops=hops, top_k=top_k,
                  result=result, error=error, elements=elements, paths=paths, kbs=knowledge_bases(db=resources.db))


# what the Ask page's own query string may carry back after a feedback post (never a URL of its own)
_ASK_PARAMS = ("question", "kb", "as_of", "hops", "top_k")


def _record_feedback(
    me: AdminSession, resources: Resources, *, kb: str, question: str, answer: str, verdict: str, expected: str,
    reasoner_version: str,
) -> str:
    """Record one ✓ or ✗ from the Ask page through the feedback service; the row's thank-you line."""
    if verdict not in ("right", "wrong"):
        raise BadRequest("mark the answer right or wrong")
    correct = verdict == "right"
    try:
        item = FeedbackItem(
            question=question, answer=answer, correct=correct,
            # the right-answer box belongs to ✗: what was typed there before a ✓ is dropped
            expected=None if correct or not expected.strip() else expected,
            reasoner_version=reasoner_version.strip() or None,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadRequest(f"{'.'.join(str(p) for p in first['loc']) or 'feedback'}: {first['msg']}") from None
    kb = _kb(kb)
    feedback_service.require_kb(store=resources.store, kb=kb)
    feedback_service.record(db=resources.db, kb=kb, items=[item], actor=me.actor)
    return f"thanks: marked {verdict}" + (f" (right answer: {item.expected})" if item.expected else "")


@router.post("/ask/feedback")
def ask_feedback(
    request: Request, me: Reviewer, resources: ResourcesDep, question: Annotated[str, Form()],
    answer: Annotated[str, Form()], verdict: Annotated[str, Form()], kb: Annotated[str, Form()] = DEFAULT_KB,
    expected: Annotated[str, Form()] = "", reasoner_version: Annotated[str, Form()] = "",
    back: Annotated[str, Form()] = "",
) -> Response:
    """The form post of a ✓ or ✗ without scripts: back to the same question, with the thank-you line."""
    message = _record_feedback(me, resources, kb=kb, question=question, answer=answer, verdict=verdict,
                               expected=expected, reasoner_version=reasoner_version)
    kept = [(k, v) for k, v in parse_qsl(back) if k in _ASK_PARAMS]
    return flash(request, redirect(f"{PREFIX}/ask?{urlencode(kept)}"), message)


@router.post("/api/feedback")
def ask_feedback_api(
    me: Reviewer, resources: ResourcesDep, question: Annotated[str, Form()], answer: Annotated[str, Form()],
    verdict: Annotated[str, Form()], kb: Annotated[str, Form()] = DEFAULT_KB, expected: Annotated[str, Form()] = "",
    reasoner_version: Annotated[str, Form()] = "",
) -> JSONResponse:
    """The same, for the page script: the row shows the answer's message in place of its buttons."""
    message = _record_feedback(me, resources, kb=kb, question=question, answer=answer, verdict=verdict,
                               expected=expected, reasoner_version=reasoner_version)
    return JSONResponse({"message": message}, status_code=201)
