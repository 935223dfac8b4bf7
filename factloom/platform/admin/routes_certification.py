"""The blind audit page (reviewers) and the Certification page (admins).

The blind audit shows a sampled fact's claim and evidence only — never its verdict, fused probability
or verifier results — so the label is the auditor's own judgement (factloom.platform.certification).
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from factloom.learn.certification import history, latest_runs
from factloom.ledger import AuditSample, FactSubmission
from factloom.platform.admin.auth import AdminOnly, Reviewer
from factloom.platform.admin.render import PREFIX, AdminRoute, evidence_image, flash, redirect, render
from factloom.platform.admin.visuals import certification_chart
from factloom.platform.certification import service as audit
from factloom.platform.deps import ResourcesDep
from factloom.platform.errors import BadRequest, Conflict

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, route_class=AdminRoute, include_in_schema=False)
_SKIPPED = 200  # most skipped items one page carries along
_KB = re.compile(r"^[A-Za-z0-9_.:-]{0,64}$")


def _skipped(value: str) -> list[int]:
    """The sample ids this auditor passed over ("can't tell"), from the comma list the page carries."""
    out = []
    for part in value.split(",")[-_SKIPPED:]:
        if part.strip().isdigit():
            out.append(int(part))
    return out


def _query(kb: str, skip: list[int]) -> str:
    parts = [f"kb={kb}"] if kb else []
    if skip:
        parts.append("skip=" + ",".join(str(s) for s in skip))
    return "&".join(parts)


def _kb(value: str) -> str:
    if not _KB.match(value):
        raise BadRequest("kb: letters, digits and _ . : - only, at most 64")
    return value


@router.get("/blind-audit")
def blind_audit(request: Request, me: Reviewer, resources: ResourcesDep, kb: str = "", skip: str = "") -> Response:
    kb = _kb(kb)
    skipped = _skipped(skip)
    item = audit.next_item(db=resources.db, kb=kb or None, skip=skipped)
    return render(request, "blind_audit.html", item=item, kb=kb, skip=",".join(map(str, skipped)),
                  waiting=audit.backlog(db=resources.db, kb=kb or None), skipped=len(skipped))


@router.post("/blind-audit/{sample_id}")
def label(
    sample_id: int, request: Request, me: Reviewer, resources: ResourcesDep,
    value: Annotated[str, Form(alias="label")], kb: Annotated[str, Form()] = "", skip: Annotated[str, Form()] = "",
) -> Response:
    kb = _kb(kb)
    skipped = _skipped(skip)
    if value == audit.SKIP:
        return redirect(f"{PREFIX}/blind-audit?{_query(kb, [*skipped, sample_id])}")
    try:
        to_review = audit.label(db=resources.db, sample_id=sample_id, value=value, actor=me.actor)
    except Conflict as exc:
        return flash(request, redirect(f"{PREFIX}/blind-audit?{_query(kb, skipped)}"), exc.detail, "warn")
    message = (f"Labelled sample {sample_id}: the automatic verdict disagrees, so the fact went back to review"
               if to_review else f"Labelled sample {sample_id}")
    return flash(request, redirect(f"{PREFIX}/blind-audit?{_query(kb, skipped)}"), message)


@router.get("/blind-audit/{sample_id}/image")
def audit_image(sample_id: int, me: Reviewer, resources: ResourcesDep) -> Response:
    """The sampled fact's evidence image, by sample id (the page names no submission)."""
    with resources.db.session() as session:
        sample = session.get(AuditSample, sample_id)
        row = session.get(FactSubmission, sample.submission_id) if sample is not None else None
        evidence = (row.evidence or {}) if row is not None else {}
    return evidence_image(resources.settings.evidence_dir, evidence, f"audit sample {sample_id}")


@router.get("/certification")
def certification_page(request: Request, _: AdminOnly, resources: ResourcesDep) -> Response:
    kbs = latest_runs(resources.db)
    charts = {kb: certification_chart(history(db=resources.db, kb=kb)) for kb in kbs}
    return render(request, "certification.html", kbs=kbs, charts=charts, settings=resources.settings)
