"""The sweeper: re-enqueue the submissions whose message is gone, and only those.

A submission waits in the ledger (``pending`` to check, ``accepted`` or ``reviewed`` to commit) while
its message waits in the broker. A message can be lost: Redis restarted without persistence, or a
worker killed mid-task (its unacknowledged message comes back only after the broker's visibility
timeout, an hour). A submission untouched for ``sweep_after_s`` is *lost* when no message for it is
in flight: none queued in the broker and none held by a live worker (running, prefetched, or waiting
for a retry's countdown). A submission that is merely queued behind a long backlog is left alone.

What is in flight is read from two places at one moment: the broker's lists for the ``check`` queue
(kombu's Redis layout: one list per priority step, each item a JSON envelope with a base64 body of
``[args, kwargs, embed]``), and the workers' own answer to ``inspect`` (active, reserved, scheduled).
A message moving between the two while they are read can make a submission look lost; it is then
checked twice, which changes nothing (every step is idempotent).
"""

from __future__ import annotations

import base64
import json
import logging
from datetime import timedelta
from typing import Any

import redis
from celery import Celery
from kombu.transport.redis import PRIORITY_STEPS, Channel

from factloom.workers import pipeline
from factloom.workers.context import WorkerContext

__all__ = ["CHECK_TASK", "COMMIT_TASK", "QUEUE", "in_flight", "lost_submissions"]

log = logging.getLogger(__name__)

CHECK_TASK = "factloom.check.submissions"
COMMIT_TASK = "factloom.check.commit"
QUEUE = "check"  # both tasks are routed here (factloom.workers.app)
_INSPECT_TIMEOUT_S = 1.0  # a worker answers in milliseconds; each of the three questions waits this long


def _ids_of(task: str | None, args: Any, found: dict[str, set[str]]) -> None:
    if task in found and isinstance(args, list | tuple) and args and isinstance(args[0], list):
        found[task].update(str(i) for i in args[0])


def _queued(client: redis.Redis, found: dict[str, set[str]]) -> None:
    # kombu's Redis transport keeps one list per priority step: "check", then "check<sep><step>"
    for key in (QUEUE, *(f"{QUEUE}{Channel.sep}{step}" for step in PRIORITY_STEPS if step)):
        for raw in client.lrange(key, 0, -1):
            envelope = json.loads(raw)
            body = envelope["body"]
            if envelope.get("properties", {}).get("body_encoding") == "base64":
                body = base64.b64decode(body)
            args, _kwargs, _embed = json.loads(body)
            _ids_of(envelope.get("headers", {}).get("task"), args, found)


def _held_by_workers(app: Celery, found: dict[str, set[str]]) -> None:
    inspect = app.control.inspect(timeout=_INSPECT_TIMEOUT_S)
    for requests in (inspect.active() or {}).values():
        for request in requests:
            _ids_of(request.get("name"), request.get("args"), found)
    for requests in (inspect.reserved() or {}).values():
        for request in requests:
            _ids_of(request.get("name"), request.get("args"), found)
    for entries in (inspect.scheduled() or {}).values():  # a retry waiting for its countdown
        for entry in entries:
            request = entry.get("request", {})
            _ids_of(request.get("name"), request.get("args"), found)


def in_flight(app: Celery, client: redis.Redis) -> dict[str, set[str]]:
    """Submission ids with a message in flight, by task: queued in the broker or held by a worker.

    The broker is read before the workers are asked, so a message taken from the queue in between
    is seen in a worker's answer."""
    found: dict[str, set[str]] = {CHECK_TASK: set(), COMMIT_TASK: set()}
    _queued(client, found)
    _held_by_workers(app, found)
    return found


def lost_submissions(ctx: WorkerContext, app: Celery, client: redis.Redis, *,
                     limit: int = 5000) -> tuple[list[str], list[str]]:
    """(to check, to commit): up to ``limit`` each of the submissions untouched for the sweep
    period whose message is nowhere in flight."""
    flying = in_flight(app, client)
    older_than = timedelta(seconds=ctx.settings.sweep_after_s)
    stale_check, stale_commit = pipeline.stale_submissions(ctx, older_than)
    return ([i for i in stale_check if i not in flying[CHECK_TASK]][:limit],
            [i for i in stale_commit if i not in flying[COMMIT_TASK]][:limit])
