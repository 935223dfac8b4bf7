"""The Celery app. ``celery -A factloom.workers.app worker -Q ingest,check,learn``.

Its processes record metrics (:mod:`factloom.workers.telemetry`) into ``PROMETHEUS_MULTIPROC_DIR``
when it is set, as it must be before this module is imported.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import worker_process_init

from factloom.config import get_settings
from factloom.workers import telemetry  # noqa: F401 - connects the metrics' task and worker signals

__all__ = ["app", "make_app", "QUEUES", "torch_threads"]

QUEUES = ("ingest", "check", "learn")


def torch_threads(concurrency: int, cores: int | None = None) -> int:
    """Intra-op threads for each of ``concurrency`` worker processes sharing ``cores``.

    Every process taking all cores oversubscribes the CPU: two children embedding with MiniLM at two
    threads each on the 2-core machine managed 108-211 texts/s together, at one thread each 275-316.
    """
    return max(1, (cores or os.cpu_count() or 1) // max(1, concurrency))


@worker_process_init.connect
def _share_cores(**_: Any) -> None:
    import torch

    torch.set_num_threads(torch_threads(app.conf.worker_concurrency or os.cpu_count() or 1))


def make_app(broker_url: str, sweep_every_s: float, concurrency: int = 2, learn_every_s: float = 60.0,
             monitor_every_s: float = 60.0, certify_every_s: float = 3600.0) -> Celery:
    celery = Celery("factloom", broker=broker_url, backend=broker_url, include=["factloom.workers.tasks"])
    celery.conf.update(
        # FACTLOOM_WORKER_CONCURRENCY, not `-c`: the children size their torch threads from it
        worker_concurrency=concurrency,
        task_default_queue="check",
        # the learn plan and the model monitor are a few counts: they run beside ingest, not behind a
        # long update
        task_routes={"factloom.check.*": {"queue": "check"}, "factloom.ingest.*": {"queue": "ingest"},
                     "factloom.learn.plan": {"queue": "ingest"}, "factloom.learn.monitor": {"queue": "ingest"},
                     "factloom.learn.recertify": {"queue": "ingest"},
                     "factloom.learn.*": {"queue": "learn"}},
        # a task is acknowledged after it ran, and redelivered if its worker dies: with idempotent
        # tasks (by submission and fact id) a killed worker loses nothing and duplicates nothing
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=3600,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 3600},
        beat_schedule={
            "sweep-stale-submissions": {"task": "factloom.ingest.sweep", "schedule": sweep_every_s},
            "embed-new-entities": {"task": "factloom.ingest.embed_entities", "schedule": 10.0},
            "plan-learning": {"task": "factloom.learn.plan", "schedule": learn_every_s},
            "monitor-models": {"task": "factloom.learn.monitor", "schedule": monitor_every_s},
            "recertify-thresholds": {"task": "factloom.learn.recertify", "schedule": certify_every_s},
        },
    )
    celery.set_default()  # tasks declared with @shared_task bind to this app in every process
    return celery


_settings = get_settings()
app = make_app(_settings.redis_url, _settings.sweep_every_s, _settings.worker_concurrency, _settings.learn_period_s,
               _settings.monitor_period_s, _settings.certification_period_s)
