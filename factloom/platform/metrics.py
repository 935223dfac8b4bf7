"""The API's side of the metrics: what ``/metrics`` exposes, and the gauges read at scrape time.

Every metric is defined once, in :mod:`factloom.metrics` (re-exported here for the API's modules).
The API may run as several processes (``factloom api`` with ``FACTLOOM_API_WORKERS``), and beside
them the Celery workers; when they share a ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's
multiprocess mode, chosen when the variable is set before ``prometheus_client`` is imported; the
local platform gives every process one, :func:`factloom.platform.services.metrics_dir`) a scrape,
whichever process answers it, sums them all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from factloom.ledger import Database, FactSubmission
from factloom.metrics import (
    ALERTS_RECEIVED,
    FEEDBACK,
    INGESTED,
    MULTIPROC_ENV,
    REGISTRY,
    REQUEST_SECONDS,
    multiprocess_dir,
    multiprocess_registry,
    reset_multiprocess_dir,
)

__all__ = ["REGISTRY", "REQUEST_SECONDS", "INGESTED", "FEEDBACK", "ALERTS_RECEIVED", "LedgerCollector",
           "MULTIPROC_ENV", "reset_multiprocess_dir", "scrape_registry"]

log = logging.getLogger(__name__)


def scrape_registry(ledger: Collector) -> CollectorRegistry:
    """What ``/metrics`` exposes: the counts of every process sharing the multiprocess directory (the
    API's, the workers'), else this process's ``REGISTRY``; the ledger's gauges either way (read at
    scrape time)."""
    shared = multiprocess_dir()
    if shared is None:
        return REGISTRY  # the ledger collector is registered there for the app's lifetime
    registry = multiprocess_registry(shared)
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
        yield from certification_gauges(self.db)


def certification_gauges(db: Database) -> list[GaugeMetricFamily]:
    """Each kb's live certification, as its newest re-certification run left it (the admin Certification
    page shows the same rows, :func:`factloom.learn.certification.latest_runs`)."""
    from factloom.learn.certification import latest_runs

    bound = GaugeMetricFamily("factloom_certified_error_bound", "Upper confidence bound on the error among a kb's "
                              "automatic verdicts at the threshold in service (side: accept, reject)",
                              labels=["kb", "side"])
    target = GaugeMetricFamily("factloom_certification_target", "The error a kb's automatic verdicts are "
                               "certified against (side: accept, reject)", labels=["kb", "side"])
    audit_error = GaugeMetricFamily("factloom_audit_error", "Error the blind audit found among a kb's automatic "
                                    "verdicts, weighted by inverse inclusion probability (side: accept, reject)",
                                    labels=["kb", "side"])
    automation = GaugeMetricFamily("factloom_automation_ratio", "Share of a kb's checked facts decided without "
                                   "review", labels=["kb"])
    backlog = GaugeMetricFamily("factloom_audit_backlog", "Sampled facts waiting for their blind-audit label",
                                labels=["kb"])
    try:
        runs = latest_runs(db)
    except Exception:
        log.warning("ledger unavailable for the certification metrics", exc_info=True)
        runs = {}
    for kb, f in runs.items():
        for side, goal in (("accept", f["target"]), ("reject", f["reject_target"])):
            target.add_metric([kb, side], float(goal))
            if f["bound"].get(side) is not None:
                bound.add_metric([kb, side], float(f["bound"][side]))
            if f["audit_error"][side].get("rate") is not None:
                audit_error.add_metric([kb, side], float(f["audit_error"][side]["rate"]))
        if f.get("automation") is not None:
            automation.add_metric([kb], float(f["automation"]))
        backlog.add_metric([kb], float(f["backlog"]))
    return [bound, target, audit_error, automation, backlog]
