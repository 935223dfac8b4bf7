"""Prometheus metrics: request latency, ingest and verdict counts, queue depth.

The API may run as several processes (``factloom api`` with ``FACTLOOM_API_WORKERS``); then each
process writes its counts under ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess
mode, chosen when the variable is set before this module is imported) and a scrape, whichever
process answers it, sums them all.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from factloom.ledger import Database, FactSubmission

__all__ = ["REGISTRY", "REQUEST_SECONDS", "INGESTED", "FEEDBACK", "LedgerCollector", "MULTIPROC_ENV",
           "reset_multiprocess_dir", "scrape_registry"]

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry()
REQUEST_SECONDS = Histogram(
    "factloom_http_request_seconds", "HTTP request latency", ["method", "route", "status"],
    registry=REGISTRY, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
INGESTED = Counter("factloom_ingested_facts", "Fact submissions accepted into the ledger", registry=REGISTRY)
FEEDBACK = Counter("factloom_answer_feedback", "Answer feedback items recorded, by kb and whether the answer was right",
                   ["kb", "correct"], registry=REGISTRY)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def reset_multiprocess_dir(path: Path) -> None:
    """Make ``path`` an empty directory for a new set of API processes (prometheus_client requires
    it: an earlier run's files would be summed in); only its ``*.db`` files are removed."""
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink(missing_ok=True)


def scrape_registry(ledger: Collector) -> CollectorRegistry:
    """What ``/metrics`` exposes: every API process's counts when they share a multiprocess directory,
    else this process's ``REGISTRY``; the ledger's gauges either way (read at scrape time)."""
    if not os.environ.get(MULTIPROC_ENV):
        return REGISTRY  # the ledger collector is registered there for the app's lifetime
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(ledger)
    return registry


class LedgerCollector(Collector):
    """Submissions per status (the verdict counts) and Celery queue depths, read at scrape time.

    Reading them from the ledger and the broker, not counting in-process, keeps them right across
    API replicas and worker processes.
    """

    def __init__(self, db: Database, redis_url: str, queues: tuple[str, ...]) -> None:
        self.db = db
        self.redis_url = redis_url
        self.queues = queues

    def collect(self) -> Iterator[GaugeMetricFamily]:
        submissions = GaugeMetricFamily("factloom_submissions", "Fact submissions by status", labels=["status"])
        try:
            with self.db.session() as session:
                rows = session.execute(select(FactSubmission.status, func.count()).group_by(FactSubmission.status))
                for status, n in rows:
                    submissions.add_metric([status.value], n)
        except Exception:
            log.warning("ledger unavailable for metrics", exc_info=True)
        yield submissions
        depth = GaugeMetricFamily("factloom_queue_depth", "Messages waiting per Celery queue", labels=["queue"])
        try:
            import redis

            client = redis.Redis.from_url(self.redis_url, socket_timeout=1)
            for queue in self.queues:
                depth.add_metric([queue], client.llen(queue))
        except Exception:
            log.warning("broker unavailable for metrics", exc_info=True)
        yield depth
