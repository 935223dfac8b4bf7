"""A Celery worker's metrics: task run time, its children's exit, and its own ``/metrics`` port.

* ``factloom_task_seconds{queue,task,outcome}``: from ``task_prerun`` to ``task_postrun``, in the
  process that ran the task. ``task_postrun`` carries the task's state (``SUCCESS``, ``RETRY`` when
  ``autoretry_for`` or ``self.retry`` sends it again, ``FAILURE``), so one signal records every
  outcome once; ``task_failure`` and ``task_retry`` would count the same runs a second time.
* A prefork child that exits (``worker_process_shutdown``) has its live gauges forgotten
  (:func:`factloom.metrics.mark_process_dead`), so a gauge of a ``live*`` mode shows running
  processes only.
* ``FACTLOOM_WORKER_METRICS_PORT`` (0: off): on ``worker_ready`` the worker's main process serves
  every process's values from its multiprocess directory (:func:`serve_metrics`), for a worker on
  a machine or pod of its own. The tasks run in the pool's children, so that directory is needed:
  set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory of the worker's own; without it the port
  is not served and the log says why. Locally the API's ``/metrics`` has the workers' counts already
  (the services share one directory).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from celery import Task
from celery.signals import task_postrun, task_prerun, worker_process_shutdown, worker_ready
from prometheus_client import start_http_server

from factloom.config import get_settings
from factloom.metrics import MULTIPROC_ENV, TASK_SECONDS, mark_process_dead, multiprocess_dir, multiprocess_registry

__all__ = ["OUTCOMES", "serve_metrics", "queue_of"]

log = logging.getLogger(__name__)

# a task's final state → the outcome label; anything else (REJECTED, an unknown state) is a failure
OUTCOMES = {"SUCCESS": "success", "RETRY": "retry", "FAILURE": "failure"}

_started: dict[str, float] = {}  # task id → when it started, in this process (one thread per task)


def queue_of(task: Task) -> str:
    """The queue the running task was taken from (its routing key: ours route by queue name)."""
    info = task.request.delivery_info or {}
    return str(info.get("routing_key") or info.get("queue") or "none")


@task_prerun.connect
def _task_started(task_id: str, **_: Any) -> None:
    _started[task_id] = time.perf_counter()


@task_postrun.connect
def _task_finished(task_id: str, task: Task, state: str | None = None, **_: Any) -> None:
    started = _started.pop(task_id, None)
    if started is None:
        return
    TASK_SECONDS.labels(queue_of(task), task.name, OUTCOMES.get(state or "", "failure")).observe(
        time.perf_counter() - started)


@worker_process_shutdown.connect
def _child_exited(pid: int | None = None, **_: Any) -> None:
    mark_process_dead(pid or os.getpid())


@worker_ready.connect
def _serve_on_ready(**_: Any) -> None:
    port = get_settings().worker_metrics_port
    if port:
        serve_metrics(port)


def serve_metrics(port: int, addr: str = "0.0.0.0", path: Path | None = None) -> WSGIServer | None:  # noqa: S104 - scraped from other machines, like the API's /metrics
    """Serve every process's values from the multiprocess directory ``path`` (this process's, by
    default) on ``addr:port`` in a daemon thread; ``None`` (logged) when there is no such directory
    or the port is taken (a second worker on the machine)."""
    shared = path or multiprocess_dir()
    if shared is None:
        log.error("FACTLOOM_WORKER_METRICS_PORT=%d is not served: the tasks run in the pool's child processes, "
                  "whose values only a multiprocess directory collects; set %s to an empty directory of this "
                  "worker's own", port, MULTIPROC_ENV)
        return None
    try:
        server, _ = start_http_server(port, addr, registry=multiprocess_registry(shared))
    except OSError as exc:
        log.warning("worker metrics: port %d not served: %s", port, exc)
        return None
    log.info("worker metrics on http://%s:%d/metrics (every process writing to %s)", addr, port, shared)
    return server
