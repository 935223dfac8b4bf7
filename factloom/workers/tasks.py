"""Celery tasks. Each takes ids only, reloads state, and is idempotent."""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery import Task, shared_task
from sqlalchemy import update

from factloom.ledger import FactSubmission
from factloom.ledger.tables import utcnow
from factloom.workers import pipeline
from factloom.workers.context import WorkerContext, context

__all__ = ["check_submissions", "commit_submissions", "embed_entities", "sweep", "plan_learning", "learn_update",
           "monitor_models", "retract_submissions", "recertify",
           "enqueue_check", "enqueue_retract", "enqueue_commit", "enqueue_learn"]

log = logging.getLogger(__name__)

_RETRY = {"autoretry_for": (Exception,), "retry_backoff": True, "retry_backoff_max": 60, "max_retries": 8}


@shared_task(name="factloom.check.submissions", **_RETRY)
def check_submissions(ids: list[str]) -> dict[str, int]:
    return pipeline.check_submissions(context(), ids)


@shared_task(name="factloom.check.commit", **_RETRY)
def commit_submissions(ids: list[str]) -> int:
    return pipeline.commit_submissions(context(), ids)


@shared_task(name="factloom.check.retract", **_RETRY)
def retract_submissions(ids: list[str]) -> int:
    """Take the facts of rejected submissions back out of the graph (idempotent: retracting twice
    restores nothing the second time); a reviewer's reject of a fact the audit sent back to review."""
    ctx = context()
    return pipeline.retract_submissions(ctx.db, ctx.store, ids)


@shared_task(name="factloom.ingest.embed_entities", **_RETRY)
def embed_entities(budget_s: float = 60.0) -> int:
    """Give new entities their name embedding (for vector linking), in batches, one task at a time."""
    import time

    ctx = context()
    lock = ctx.redis.lock("factloom:embed-entities", timeout=300)
    if not lock.acquire(blocking=False):
        return 0  # another worker is at it; the beat schedule comes back for what is left
    done = 0
    try:
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline and (n := ctx.store.embed_pending(ctx.embedder.embed)):
            done += n
    finally:
        lock.release()
    return done


@shared_task(name="factloom.ingest.sweep", bind=True)
def sweep(self: Task) -> dict[str, int]:
    """Re-enqueue submissions whose message was lost (broker restart, worker killed); one that is
    only queued is left alone (:mod:`factloom.workers.sweeper`)."""
    from factloom.workers import sweeper

    ctx = context()
    to_check, to_commit = sweeper.lost_submissions(ctx, self.app, ctx.redis)
    ids = to_check + to_commit
    if ids:
        # touch them: the next sweep looks at them again only if these messages are lost too
        with ctx.db.session() as session:
            session.execute(update(FactSubmission).where(FactSubmission.id.in_(ids)).values(updated_at=utcnow()))
        enqueue_check(to_check, ctx.settings.check_chunk_size)
        enqueue_commit(to_commit, ctx.settings.check_chunk_size)
        log.warning("sweeper re-enqueued %d to check, %d to commit: their messages were lost",
                    len(to_check), len(to_commit))
    return {"check": len(to_check), "commit": len(to_commit)}


@shared_task(name="factloom.learn.plan")
def plan_learning() -> list[list[str]]:
    """Enqueue an update for each kb and kind with enough new facts or feedback (the beat's job)."""
    from factloom.workers import learning

    found = learning.due(context())
    for kb, kind in found:
        enqueue_learn(kb, kind)
    return [list(item) for item in found]


@shared_task(name="factloom.learn.update")
def learn_update(kb: str, kind: str, force: bool = False) -> dict[str, object]:
    """One continual update (``docs/learning.md``); not retried: the next period's plan is the retry."""
    from factloom.workers import learning

    return learning.update(context(), kb, kind, force=force)


@shared_task(name="factloom.learn.monitor")
def monitor_models() -> list[dict[str, object]]:
    """Judge the kbs' active versions for this period, roll back the failing, decide A/B trials
    (:mod:`factloom.learn.monitor`; the beat's job, one look at a time)."""
    from factloom.learn.monitor import MonitorConfig, look

    ctx = context()
    # a look is running: two would count one period twice
    return _alone(ctx, "factloom:monitor", max(60.0, ctx.settings.monitor_period_s),
                  lambda: look(ctx.db, ctx.redis, MonitorConfig.of(ctx.settings)))


@shared_task(name="factloom.learn.recertify")
def recertify() -> list[dict[str, object]]:
    """Re-certify every kb's thresholds on the review and audit labels that arrived
    (:mod:`factloom.learn.certification`; the beat's job, one run at a time)."""
    from factloom.learn.certification import CertificationConfig, recertify_all

    ctx = context()
    # a run is under way: two would add the same labels twice
    return _alone(ctx, "factloom:recertify", max(300.0, ctx.settings.certification_period_s),
                  lambda: recertify_all(ctx.db, CertificationConfig.of(ctx.settings)))


def _alone(ctx: WorkerContext, name: str, timeout: float,
           run: Callable[[], list[dict[str, object]]]) -> list[dict[str, object]]:
    """``run()`` under a Redis lock, or nothing when another beat job holds it."""
    lock = ctx.redis.lock(name, timeout=timeout)
    if not lock.acquire(blocking=False):
        return []
    try:
        return run()
    finally:
        lock.release()


def enqueue_retract(ids: list[str]) -> None:
    retract_submissions.apply_async(args=[ids], queue="check")


def enqueue_learn(kb: str, kind: str, *, force: bool = False) -> None:
    learn_update.apply_async(args=[kb, kind, force], queue="learn")


def enqueue_check(ids: list[str], chunk: int) -> None:
    for start in range(0, len(ids), chunk):
        check_submissions.apply_async(args=[ids[start:start + chunk]], queue="check")


def enqueue_commit(ids: list[str], chunk: int) -> None:
    for start in range(0, len(ids), chunk):
        commit_submissions.apply_async(args=[ids[start:start + chunk]], queue="check")
