"""The learn queue's work: which kbs are due an update, and one update under a per-(kb, kind) lock.

The lock is a Redis lock whose expiry a background thread keeps pushing back while the update runs:
two workers never train the same kb and kind at once, and a worker killed mid-update (its thread
gone with it) frees the lock within ``learn_lock_ttl_s`` seconds, so the next period retries while
the active version keeps serving.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import redis

from factloom.learn import UPDATES
from factloom.learn.continual import LearnConfig, Outcome, scorer_due, update_scorer
from factloom.learn.monitor import record_learn_failure
from factloom.metrics import LEARN_UPDATES
from factloom.workers.context import WorkerContext

__all__ = ["due", "update", "held", "lock_name"]

log = logging.getLogger(__name__)



@contextlib.contextmanager
def held(client: redis.Redis, name: str, ttl_s: float) -> Iterator[bool]:
    """Yield whether the lock ``name`` was taken (without waiting); while held, renew it every ttl/3."""
    # not thread-local: the renewing thread must see the token the acquiring one got
    lock = client.lock(name, timeout=ttl_s, thread_local=False)
    if not lock.acquire(blocking=False):
        yield False
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl_s / 3):
            try:
                lock.reacquire()
            except redis.RedisError:
                log.warning("could not renew the lock %s", name, exc_info=True)

    thread = threading.Thread(target=renew, name=f"renew {name}", daemon=True)
    thread.start()
    try:
        yield True
    finally:
        stop.set()
        thread.join()
        with contextlib.suppress(redis.RedisError):
            lock.release()


def due(ctx: WorkerContext) -> list[tuple[str, str]]:
    """``(kb, kind)`` of every update whose new facts (or feedback) reached the configured amount."""
    from factloom.learn.feedback import reasoner_due

    config = LearnConfig.of(ctx.settings)
    found = [(kb, "scorer") for kb in scorer_due(ctx.db, min_facts=config.min_facts)] + \
        [(kb, "reasoner") for kb in reasoner_due(ctx.db, min_feedback=config.min_feedback)]
    # one running already: it learns what is new when it is done, no need to queue another
    return [(kb, kind) for kb, kind in found if not ctx.redis.exists(lock_name(kb, kind))]


def lock_name(kb: str, kind: str) -> str:
    return f"factloom:learn:{kind}:{kb}"


def update(ctx: WorkerContext, kb: str, kind: str, *, force: bool = False) -> dict[str, Any]:
    """One update of ``kind`` for ``kb`` unless another worker is at it; the outcome as a dict."""
    if kind not in UPDATES:
        raise ValueError(f"nothing to learn called {kind!r}; known: {', '.join(UPDATES)}")
    config = LearnConfig.of(ctx.settings)
    with held(ctx.redis, lock_name(kb, kind), ctx.settings.learn_lock_ttl_s) as mine:
        if not mine:
            LEARN_UPDATES.labels(kb, kind, "busy").inc()
            return Outcome(kb, kind, "busy").as_dict()
        try:
            if kind == "scorer":
                outcome = update_scorer(ctx.store, ctx.db, kb=kb, models_dir=ctx.settings.models_dir,
                                        config=config, force=force)
            else:
                from factloom.learn.feedback import update_reasoner

                outcome = update_reasoner(ctx.store, ctx.embedder, ctx.db, kb=kb,
                                          models_dir=ctx.settings.models_dir, config=config, force=force)
        except (Exception, SystemExit) as exc:  # the jobs exit with a message where a CLI user erred
            log.exception("learn %s %s failed; the active version keeps serving", kind, kb)
            outcome = Outcome(kb, kind, "error", gates={"error": str(exc)})
    if outcome.result in ("failed", "error"):  # the monitor counts them against the active version
        with contextlib.suppress(redis.RedisError):
            record_learn_failure(ctx.redis, kb, kind, outcome.version, outcome.result)
    LEARN_UPDATES.labels(kb, kind, outcome.result).inc()
    log.info("learn %s %s: %s", kind, kb, outcome.as_dict())
    return outcome.as_dict()
