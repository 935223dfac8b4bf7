"""The review queue and the review item pages, and the decisions taken on them."""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Form, Request, Response
from starlette.concurrency import run_in_threadpool

from factloom.graph.errors import GraphUnavailable
from factloom.ledger import Status
from factloom.platform.admin import groups, review
from factloom.platform.admin import queue as q
from factloom.platform.admin.auth import AdminOnly, AdminSession, Reviewer
from factloom.platform.admin.batches import knowledge_bases
from factloom.platform.admin.render import PREFIX, AdminRoute, evidence_image, flash, redirect, render
from factloom.platform.admin.routes_auth import safe_next
from factloom.platform.admin.visuals import neighbourhood_elements, verifier_chart
from factloom.platform.deps import ResourcesDep
from factloom.platform.errors import BadRequest, Conflict
from factloom.platform.resources import Resources
from factloom.platform.review import service as review_service
from factloom.verify.reasons import REVIEW_REASONS

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, route_class=AdminRoute, include_in_schema=False)


def _filters_from(query: str) -> q.QueueFilters:
    filters, _ = q.parse_filters(dict(parse_qsl(query)))
    return filters


@router.get("/queue")
def queue_page(request: Request, me: Reviewer, resources: ResourcesDep) -> Response:
    params = dict(request.query_params)
    filters, errors = q.parse_filters(params)
    db = resources.db
    page = q.list_queue(db=db, filters=filters, limit=resources.settings.admin_page_size,
                        after=params.get("after") or None, before=params.get("before") or None)
    reasons = groups.reason_groups(db=db, filters=filters) if filters.group == "reason" else []
    claims, contested = groups.claim_groups(db=db, filters=filters) if filters.group == "claim" else ([], 0)
    return render(
        request, "queue.html", page=page, filters=filters, errors=errors, sorts=q.SORTS, ages=q.AGES,
        groupings=q.GROUPS, reasons=reasons, all_reasons=REVIEW_REASONS, claims=claims, contested=contested,
        counts=q.queue_counts(db=db, reviewer=me.actor, kb=filters.kb), facets=q.facets(db=db, kb=filters.kb),
        kbs=knowledge_bases(db=db),
    )


@router.get("/review/{submission_id}")
def item_page(submission_id: str, request: Request, me: Reviewer, resources: ResourcesDep) -> Response:
    filters, _ = q.parse_filters(dict(request.query_params))
    item = review.load_item(db=resources.db, submission_id=submission_id)
    prev_id, next_id = q.neighbours(db=resources.db, filters=filters, submission_id=submission_id)
    graph_note, elements, conflicting = None, [], []
    try:
        conflicting = review.conflicts(store=resources.store, item=item,
                                       functional=resources.settings.functional_predicates)
        graph, ids = review.item_graph(store=resources.store, item=item)
        elements = neighbourhood_elements(graph, focus=ids.values())
        elements += _claim_elements(item, ids)
        if graph.truncated:
            graph_note = ("large neighbourhood: a busy relation shows its first neighbours and a '+N more' node "
                          "that pages on click")
    except GraphUnavailable as exc:
        graph_note = f"the graph is unavailable: {exc}"
    fusion = item.fusion
    chart = verifier_chart(
        [(c.verifier, c.probability) for c in item.checks],
        accept=_threshold(fusion, "accept"), reject=_threshold(fusion, "reject"),
    )
    image = _image_of(item.row.id, item.row.evidence)
    return render(request, "item.html", item=item, row=item.row, chart=chart, conflicting=conflicting,
                  elements=elements, graph_note=graph_note, prev_id=prev_id, next_id=next_id,
                  back=filters.query(), image=image, reasons=REVIEW_REASONS)


def _threshold(fusion: review.Check | None, name: str) -> float | None:
    value = fusion.details.get(name) if fusion else None
    return float(value) if isinstance(value, int | float) else None


def _image_of(row_id: str, evidence: dict[str, object] | None) -> str | None:
    """The URL of the submission's stored evidence image, when it came with one."""
    image = (evidence or {}).get("image")
    return f"{PREFIX}/review/{row_id}/image" if isinstance(image, dict) and image.get("sha256") else None


@router.get("/review/{submission_id}/image")
def item_image(submission_id: str, me: Reviewer, resources: ResourcesDep) -> Response:
    """The evidence image uploaded with a submission, read from the content-addressed store."""
    item = review.load_item(db=resources.db, submission_id=submission_id)
    return evidence_image(resources.settings.evidence_dir, item.row.evidence, f"submission {submission_id}")


def _claim_elements(item: review.Item, ids: dict[str, str]) -> list[dict[str, object]]:
    """The claim itself as a dashed edge, with nodes for a subject or object not yet in the graph."""
    row = item.row
    out: list[dict[str, object]] = []
    ends = []
    for name in (row.subject, row.object):
        node_id = ids.get(name)
        if node_id is None:
            node_id = f"new:{name}"
            out.append({"data": {"id": node_id, "label": name}, "classes": "focus new"})
        ends.append(node_id)
    out.append({"data": {"id": f"claim:{row.id}", "source": ends[0], "target": ends[1],
                         "label": row.predicate}, "classes": "claim"})
    return out


@router.post("/review/{submission_id}/decide")
def decide(
    submission_id: str, request: Request, me: Reviewer, resources: ResourcesDep,
    decision: Annotated[str, Form()], reason: Annotated[str, Form()] = "", back: Annotated[str, Form()] = "",
) -> Response:
    filters = _filters_from(back)
    _, next_id = q.neighbours(db=resources.db, filters=filters, submission_id=submission_id)
    start = time.time()
    try:
        status = review.decide(db=resources.db, submission_id=submission_id, decision=decision, reason=reason,
                               actor=me.actor, **_decider(me, resources))
    except Conflict as exc:  # someone else was quicker: show the item as it now stands
        return flash(request, redirect(f"{PREFIX}/review/{submission_id}?{back}"), exc.detail, "warn")
    message = {"accept": f"Accepted {submission_id[:8]}", "reject": f"Rejected {submission_id[:8]}",
               "keep_both": f"Accepted {submission_id[:8]} beside the current value"}.get(decision, "")
    if status is Status.needs_review:  # a kb that needs two reviewers
        waits_for = review.load_item(db=resources.db, submission_id=submission_id).row.review_reason
        message = (f"Your opinion on {submission_id[:8]} is recorded; a second reviewer decides it"
                   if waits_for == review_service.SECOND_OPINION else
                   f"The reviewers disagree on {submission_id[:8]}; an admin decides it")
    elif decision != "reject":
        message += " — it is being committed to the graph"
    target = f"{PREFIX}/review/{next_id}?{back}" if next_id else f"{PREFIX}/queue?{back}"
    return flash(request, redirect(target), message, undo=(start, time.time()))


def _decider(me: AdminSession, resources: Resources) -> dict[str, Any]:
    """How many reviewers the items of each kb need, whether this one's decision is final, and the store
    a reject takes an audited fact out of at once."""
    return {"second_opinion_kbs": frozenset(resources.settings.review_second_opinion), "settles": me.user.is_admin,
            "store": resources.store}


@router.post("/review/{submission_id}/correct")
def correct(
    submission_id: str, request: Request, me: Reviewer, resources: ResourcesDep,
    subject: Annotated[str, Form()], predicate: Annotated[str, Form()], object: Annotated[str, Form()],
    reason: Annotated[str, Form()] = "", back: Annotated[str, Form()] = "",
) -> Response:
    start = time.time()
    new_id = review.correct(db=resources.db, submission_id=submission_id, subject=subject, predicate=predicate,
                            obj=object, reason=reason, actor=me.actor)
    return flash(request, redirect(f"{PREFIX}/review/{new_id}?{back}"),
                 f"Corrected and accepted as {new_id[:8]}; the original is rejected", undo=(start, time.time()))


@router.post("/queue/bulk")
async def bulk(request: Request, me: Reviewer, resources: ResourcesDep) -> Response:
    # async to read the form's repeated ``ids``; the ledger's blocking SQL runs on a worker thread
    form = await request.form()
    return await run_in_threadpool(_bulk, request, me, resources, [str(v) for v in form.getlist("ids")],
                                   {k: str(v) for k, v in form.items() if k != "ids"})


def _bulk(request: Request, me: AdminSession, resources: Resources, ids: list[str], form: dict[str, str]) -> Response:
    decision = form.get("decision", "")
    reason = form.get("reason", "")
    back = form.get("back", "")
    if decision not in ("accept", "reject"):
        raise BadRequest("choose accept or reject")
    match = form.get("match", "")
    if not ids and match:  # a whole group: what its filters match now, a page at most, confirmed next
        group = q.list_queue(db=resources.db, filters=_filters_from(match), limit=review.MAX_BULK)
        ids = [r.id for r in group.rows]
    if not ids:
        return flash(request, redirect(f"{PREFIX}/queue?{back}"), "Select some items first", "warn")
    if form.get("confirmed") != "yes":
        rows = review.selected_rows(db=resources.db, ids=ids)
        return render(request, "confirm_bulk.html", rows=rows, decision=decision, reason=reason, back=back,
                      too_many=len(ids) > review.MAX_BULK)
    start = time.time()
    result = review.bulk_decide(db=resources.db, ids=ids, decision=decision, reason=reason, actor=me.actor,
                                **_decider(me, resources))
    verb = "Accepted" if decision == "accept" else "Rejected"
    note = f"{verb} {len(result.done)} item(s)" + (
        f"; {len(result.skipped)} were already decided" if result.skipped else "")
    return flash(request, redirect(f"{PREFIX}/queue?{back}"), note, undo=(start, time.time()))


@router.post("/queue/keep")
async def keep(request: Request, me: Reviewer, resources: ResourcesDep) -> Response:
    """Keep one of a (subject, predicate)'s rival values waiting for review and reject the others."""
    form = await request.form()
    return await run_in_threadpool(_keep, request, me, resources, str(form.get("keep", "")),
                                   [str(v) for v in form.getlist("ids")], str(form.get("back", "")))


def _keep(request: Request, me: AdminSession, resources: Resources, kept: str, rivals: list[str],
          back: str) -> Response:
    if not kept or kept not in rivals:
        raise BadRequest("choose the value to keep among the group's")
    start = time.time()
    try:
        result = review.keep_one(db=resources.db, keep=kept, rivals=rivals, actor=me.actor,
                                 **_decider(me, resources))
    except Conflict as exc:
        return flash(request, redirect(f"{PREFIX}/queue?{back}"), exc.detail, "warn")
    rejected = len(result.done) - (1 if kept in result.done else 0)
    note = f"Kept {kept[:8]} and rejected {rejected} rival value(s)" + (
        f"; {len(result.skipped)} were already decided" if result.skipped else "")
    return flash(request, redirect(f"{PREFIX}/queue?{back}"), note, undo=(start, time.time()))


@router.post("/review/undo")
def undo(
    request: Request, me: Reviewer, resources: ResourcesDep, start: Annotated[float, Form()],
    end: Annotated[float, Form()], back: Annotated[str, Form(max_length=4000)] = "",
) -> Response:
    """The undo notice's button: the decisions this reviewer just took go back to the queue."""
    result = review.undo_between(db=resources.db, store=resources.store, actor=me.actor, start=start, end=end,
                                 within_s=2 * resources.settings.admin_undo_s)
    target = safe_next(back) if back else f"{PREFIX}/queue"
    if not result.done:
        return flash(request, redirect(target), "Nothing to undo: the decision is too old or no longer yours to undo; "
                     "an admin can reopen it", "warn")
    first = result.done[0]
    note = (f"Undone: {first[:8]} is back in the queue" if len(result.done) == 1
            else f"Undone: {len(result.done)} items are back in the queue") + (
        f"; {len(result.skipped)} could not be undone" if result.skipped else "")
    return flash(request, redirect(f"{PREFIX}/review/{first}" if len(result.done) == 1 else target), note)


@router.post("/review/{submission_id}/reopen")
def reopen(
    submission_id: str, request: Request, me: AdminOnly, resources: ResourcesDep,
    reason: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    """An admin takes a decided item back into the queue; the graph is put back as it was."""
    was = review_service.reopen(db=resources.db, store=resources.store, submission_id=submission_id,
                                actor=me.actor, reason=reason.strip())
    return flash(request, redirect(f"{PREFIX}/review/{submission_id}"),
                 f"Reopened: it was {was.value}; it waits for review again and the graph is as before the decision")
