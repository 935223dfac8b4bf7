"""The check and commit steps a submission goes through, written against the ledger and the store.

Each step takes submission ids, reloads their rows, and moves only rows in the state it expects, so
running a step twice (a redelivered message, the sweeper) changes nothing the second time.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select, update

from factloom.graph import FactWrite, Neo4jStore
from factloom.ledger import AuditSample, CheckResult, Database, FactSubmission, ReviewDecision, Status
from factloom.ledger.evidence import image_path
from factloom.ledger.tables import Decision
from factloom.metrics import CHECK_VERDICTS, VERIFIER_ABSTENTIONS, VERIFIER_CHECKS
from factloom.verify import Claim, Verdict, Verifier, VerifierResult
from factloom.verify.audit import AuditSampler
from factloom.verify.base import GraphView
from factloom.verify.fusion import Fused
from factloom.verify.reasons import review_reason
from factloom.workers.context import WorkerContext

__all__ = ["check_submissions", "commit_submissions", "stale_submissions", "retract_submissions"]

log = logging.getLogger(__name__)

_VERDICT_STATUS = {
    Verdict.accept: Status.accepted, Verdict.reject: Status.rejected, Verdict.review: Status.needs_review,
}


def check_submissions(ctx: WorkerContext, ids: Sequence[str]) -> dict[str, int]:
    """Run every verifier on the submissions still waiting for a check; commit the accepted ones."""
    with ctx.db.session() as session:
        rows = session.scalars(
            select(FactSubmission)
            .where(FactSubmission.id.in_(ids), FactSubmission.status.in_([Status.pending, Status.checking]))
            .order_by(FactSubmission.created_at, FactSubmission.id)
        ).all()
        for row in rows:
            row.status = Status.checking
            row.attempts += 1
        by_kb: dict[str, list[Claim]] = {}
        for row in rows:
            by_kb.setdefault(row.kb, []).append(
                Claim(
                    submission_id=row.id, fact_id=row.fact_id, subject=row.subject,
                    predicate=row.predicate, object=row.object, source=row.source,
                    valid_from=row.valid_from, valid_to=row.valid_to,
                    evidence_text=(row.evidence or {}).get("text"), image_path=_image_of(row.evidence),
                )
            )
    counts = {"accepted": 0, "rejected": 0, "needs_review": 0}
    accepted: list[str] = []
    now = datetime.now(timezone.utc)
    for kb, claims in by_kb.items():
        checkers = ctx.checks.for_chunk(kb, claims)
        graph = ctx.store.current_facts(kb, {(c.subject, c.predicate) for c in claims})
        per_verifier = [_run(v, claims, graph, now) for v in checkers.verifiers]
        _shadow_scorer(ctx, kb, claims, graph, now, next(
            (r for v, r in zip(checkers.verifiers, per_verifier, strict=True) if v.name == "plausibility"), []))
        thresholds = checkers.thresholds()
        checks: list[dict[str, Any]] = []  # check_result rows, inserted in one executemany
        verdicts: list[dict[str, object]] = []
        grid = [[results_of[i] for results_of in per_verifier] for i in range(len(claims))]
        fuse_many = getattr(checkers.fusion, "fuse_many", None)  # a learned fusion: one batched model call
        all_fused = fuse_many(grid) if fuse_many else [checkers.fusion.fuse(r) for r in grid]
        for claim, results, fused in zip(claims, grid, all_fused, strict=True):
            status = _VERDICT_STATUS[fused.verdict]
            checks.extend(_rows(claim.submission_id, results))
            checks.append({
                "submission_id": claim.submission_id, "verifier": "fusion", "score": fused.probability,
                "probability": fused.probability, "explanation": fused.reason,
                "details": {
                    **thresholds, "verdict": fused.verdict.value, "method": type(checkers.fusion).__name__,
                    "versions": {**checkers.versions,
                                 **{r.verifier: r.model_version for r in results if r.model_version}},
                    "abstained": [r.verifier for r in results if r.probability is None],
                },
                "model_version": checkers.versions.get("fusion"),
            })
            verdicts.append({"id": claim.submission_id, "status": status, "probability": fused.probability,
                             "verdict_reason": fused.reason, "updated_at": datetime.now(timezone.utc),
                             "review_reason": review_reason(results) if status is Status.needs_review else None})
            counts[status.value] += 1
            if status is Status.accepted:
                accepted.append(claim.submission_id)
        samples = _audit_samples(ctx, kb, claims, all_fused, checkers.versions.get("fusion"))
        with ctx.db.session() as session:
            session.execute(delete(CheckResult).where(CheckResult.submission_id.in_([c.submission_id for c in claims])))
            session.execute(insert(CheckResult), checks)
            # one executemany by primary key; the status guard leaves rows another task already
            # decided untouched
            session.execute(
                update(FactSubmission).where(FactSubmission.status == Status.checking), verdicts,
                execution_options={"synchronize_session": None},
            )
            if samples:  # in the verdicts' transaction: a sampled verdict is never written without its sample
                have = set(session.scalars(select(AuditSample.submission_id).where(
                    AuditSample.submission_id.in_([a.submission_id for a in samples]))))
                session.add_all([a for a in samples if a.submission_id not in have])
        # counted once the kb's verdicts are committed: a chunk retried after a failed write counts once
        _count(kb, [_VERDICT_STATUS[f.verdict] for f in all_fused], grid)
        if checkers.versions.get("scorer"):  # the monitor compares a scorer's verdict mix with its parent's
            ctx.figures.decided(kb, str(checkers.versions["scorer"]),
                                [_VERDICT_STATUS[f.verdict].value for f in all_fused])
    if accepted:
        commit_submissions(ctx, accepted)
    return counts


def _audit_samples(ctx: WorkerContext, kb: str, claims: Sequence[Claim], fused: Sequence[Fused],
                   version: str | None) -> list[AuditSample]:
    """The chunk's automatically decided facts (accepted and rejected) that also go to the blind audit.

    ``audit_share`` of them, stratified by fused probability (:class:`~factloom.verify.audit.AuditSampler`,
    rates allocated over the chunk's decided facts); a fact is drawn by a hash of the kb's seed and its
    submission id, so a retried chunk draws the same facts. Each sample keeps its inclusion probability:
    its audit label weighs ``1 / inclusion`` in the re-certification (:mod:`factloom.learn.certification`).
    """
    share = ctx.settings.audit_share
    decided = [(c, f) for c, f in zip(claims, fused, strict=True)
               if f.verdict in (Verdict.accept, Verdict.reject) and f.probability is not None]
    if share <= 0 or not decided:
        return []
    probabilities = [float(f.probability or 0.0) for _, f in decided]
    seed = zlib.crc32(kb.encode()) ^ ctx.settings.audit_seed  # two kbs audit different facts
    sampler = AuditSampler.allocate(probabilities, share=share, seed=seed)
    chosen = sampler.select([c.submission_id for c, _ in decided], probabilities)
    strata, inclusion = sampler.strata(probabilities), sampler.inclusion(probabilities)
    return [AuditSample(submission_id=c.submission_id, kb=kb, verdict=_VERDICT_STATUS[f.verdict].value,
                        probability=p, stratum=int(h), inclusion=float(pi), fusion_version=version)
            for (c, f), p, h, pi, hit in zip(decided, probabilities, strata, inclusion, chosen, strict=True) if hit]


def _count(kb: str, statuses: Sequence[Status], grid: Sequence[Sequence[VerifierResult]]) -> None:
    """The chunk's verdicts per kb, and per verifier the facts judged and those it abstained on
    (no probability: nothing to judge with, or it failed, :func:`_run`)."""
    by_verdict: dict[str, int] = {}
    for status in statuses:
        by_verdict[status.value] = by_verdict.get(status.value, 0) + 1
    for verdict, n in by_verdict.items():
        CHECK_VERDICTS.labels(kb, verdict).inc(n)
    judged: dict[str, int] = {}
    abstained: dict[str, int] = {}
    for results in grid:
        for r in results:
            judged[r.verifier] = judged.get(r.verifier, 0) + 1
            if r.probability is None:
                abstained[r.verifier] = abstained.get(r.verifier, 0) + 1
    for verifier, n in judged.items():
        VERIFIER_CHECKS.labels(verifier).inc(n)
        VERIFIER_ABSTENTIONS.labels(verifier).inc(abstained.get(verifier, 0))


def _shadow_scorer(ctx: WorkerContext, kb: str, claims: Sequence[Claim], graph: GraphView, now: datetime,
                   active: Sequence[VerifierResult]) -> None:
    """A scorer on a shadow trial judges the chunk too, unseen: per claim its time and whether it
    agrees with the active scorer (the same side of 0.5, or both abstaining) are recorded."""
    shadow = ctx.checks.shadow_scorer(kb)
    if shadow is None or not active:
        return
    version, verifier = shadow
    t0 = time.perf_counter()
    results = _run(verifier, claims, graph, now)
    ms = (time.perf_counter() - t0) * 1000 / max(len(claims), 1)
    for mine, theirs in zip(results, active, strict=True):
        ctx.figures.answered(kb, [version], "shadow", ms, ok=not (mine.details or {}).get("error"))
        ctx.figures.compared(kb, version, agreed=_side(mine) == _side(theirs))


def _side(result: VerifierResult) -> bool | None:
    return None if result.probability is None else result.probability >= 0.5


def _run(verifier: Verifier, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
    """One verifier on the chunk; a verifier that fails abstains with the error instead of failing the task
    (the other verifiers still judge, and nothing unchecked slips through: the fusion sees the abstention)."""
    try:
        results = verifier.check(claims, graph, now)
        if len(results) != len(claims):
            raise RuntimeError(f"{len(results)} results for {len(claims)} claims")
        return results
    except Exception as exc:
        log.exception("verifier %s failed on %d claims", verifier.name, len(claims))
        why = f"verifier failed: {type(exc).__name__}: {str(exc)[:200]}"
        return [VerifierResult(verifier.name, None, why, details={"error": True}) for _ in claims]


def _image_of(evidence: dict[str, Any] | None) -> str | None:
    """The stored image's path relative to the evidence directory, from the hash the ledger keeps."""
    image = (evidence or {}).get("image")
    if not isinstance(image, dict) or "sha256" not in image:
        return None
    return str(image_path(Path("."), image["sha256"], image["content_type"]))


def _rows(submission_id: str, results: Sequence[VerifierResult]) -> list[dict[str, Any]]:
    return [
        {"submission_id": submission_id, "verifier": r.verifier, "score": r.score, "probability": r.probability,
         "explanation": r.explanation, "details": r.details or None, "model_version": r.model_version}
        for r in results
    ]


def commit_submissions(ctx: WorkerContext, ids: Sequence[str]) -> int:
    """Write accepted (or reviewed-and-accepted) submissions to Neo4j, then mark them committed."""
    with ctx.db.session() as session:
        rows = session.scalars(
            select(FactSubmission).where(
                FactSubmission.id.in_(ids), FactSubmission.status.in_([Status.accepted, Status.reviewed])
            )
        ).all()
        # a reviewer who kept both values: the claim is written beside the current one
        reviewed = [r.id for r in rows if r.status is Status.reviewed]
        beside = set(session.scalars(
            select(ReviewDecision.submission_id).where(ReviewDecision.submission_id.in_(reviewed),
                                                      ReviewDecision.decision == Decision.keep_both.value)
        )) if reviewed else set()
        work = [(r.id, r.kb, _write(r, ctx.settings.functional_predicates, r.id in beside)) for r in rows]
    by_kb: dict[str, list[FactWrite]] = {}
    for _, kb, fact in work:
        by_kb.setdefault(kb, []).append(fact)
    for kb, facts in by_kb.items():
        # the graph write is idempotent by fact_id: a crash before the ledger update below only
        # means the sweeper writes the same facts again
        ctx.store.write_facts(kb, facts)  # new entities are embedded by the embed task
    if not work:
        return 0
    written = [w[0] for w in work]
    with ctx.db.session() as session:
        session.execute(
            update(FactSubmission)
            .where(FactSubmission.id.in_(written), FactSubmission.status.in_([Status.accepted, Status.reviewed]))
            .values(status=Status.committed, committed_at=datetime.now(timezone.utc))
        )
        # a review undone while this write was under way: the graph must not keep what the ledger took back
        undone = list(session.scalars(select(FactSubmission.id).where(
            FactSubmission.id.in_(written), FactSubmission.status.in_([Status.needs_review, Status.rejected]))))
    if undone:
        retract_submissions(ctx.db, ctx.store, undone)
    return len(work) - len(undone)


def retract_submissions(db: Database, store: Neo4jStore, ids: Sequence[str]) -> int:
    """Take the facts of these submissions back out of the graph (their reviews were undone).

    A fact that other committed submissions still assert stays, with only their sources; one that
    nothing else asserts goes, and the values it superseded hold again. A submission accepted again
    by the time this runs (a late retract task) is left alone. Idempotent; returns how many values
    were restored."""
    restored = 0
    with db.session() as session:
        facts = sorted(set(session.execute(
            select(FactSubmission.kb, FactSubmission.fact_id)
            .where(FactSubmission.id.in_(list(ids)),
                   FactSubmission.status.not_in([Status.accepted, Status.reviewed, Status.committed]))).tuples()))
        others = {(kb, fact_id): list(session.scalars(select(FactSubmission.source).where(
            FactSubmission.kb == kb, FactSubmission.fact_id == fact_id, FactSubmission.status == Status.committed,
            FactSubmission.id.not_in(list(ids))))) for kb, fact_id in facts}
    for kb, fact_id in facts:
        held_by = others[(kb, fact_id)]
        if held_by:
            store.set_fact_sources(kb, fact_id, sorted({s for s in held_by if s}))
        else:
            restored += store.retract_fact(kb, fact_id)
    return restored


def _write(row: FactSubmission, functional: Sequence[str], beside: bool = False) -> FactWrite:
    return FactWrite(
        fact_id=row.fact_id, subject=row.subject, predicate=row.predicate, object=row.object,
        source=row.source, confidence=row.probability if row.probability is not None else 1.0,
        valid_from=row.valid_from, valid_to=row.valid_to,
        # a checked or reviewed value of a functional predicate replaces the current one, unless
        # the reviewer kept both
        supersede=row.predicate in functional and not beside,
    )


def stale_submissions(ctx: WorkerContext, older_than: timedelta) -> tuple[list[str], list[str]]:
    """Ids untouched for ``older_than``: (still to check, accepted but not yet in the graph).

    All of them, ids only: most are usually queued behind a backlog, and the sweeper must look
    past those to find the few whose message was lost."""
    cutoff = datetime.now(timezone.utc) - older_than
    with ctx.db.session() as session:
        to_check = session.scalars(
            select(FactSubmission.id)
            .where(FactSubmission.status.in_([Status.pending, Status.checking]), FactSubmission.updated_at < cutoff)
        ).all()
        to_commit = session.scalars(
            select(FactSubmission.id)
            .where(FactSubmission.status.in_([Status.accepted, Status.reviewed]), FactSubmission.updated_at < cutoff)
        ).all()
    return list(to_check), list(to_commit)
