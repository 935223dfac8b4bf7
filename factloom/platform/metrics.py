"""Prometheus metrics: request latency, ingest and verdict counts, queue depth."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from factloom.ledger import Database, FactSubmission

__all__ = ["REGISTRY", "REQUEST_SECONDS", "INGESTED", "LedgerCollector"]

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry()
REQUEST_SECONDS = Histogram(
    "factloom_http_request_seconds", "HTTP request latency", ["method", "route", "status"],
    registry=REGISTRY, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
INGESTED = Counter("factloom_ingested_facts", "Fact submissions accepted into the ledger", registry=REGISTRY)


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
