"""Every Prometheus metric FactLoom records, defined once (the catalogue in docs/operations.md, "Metrics").

The names and labels are a contract with the alert rules (``deploy/prometheus/``) and the Grafana
dashboard (``deploy/grafana/``); ``tests/platform/test_metrics.py`` checks that every ``factloom_*`` name
they use is defined here or by the API's scrape-time collector
(:class:`factloom.platform.metrics.LedgerCollector`).

Multiprocess: when ``PROMETHEUS_MULTIPROC_DIR`` is set before ``prometheus_client`` is first
imported, every process (each API process, each Celery worker child, the learner, beat) writes its
values to files of its own in that directory, and a scrape sums them
(:func:`multiprocess_registry`). The local platform gives all of them one directory
(``home/run/metrics-PORT``, :func:`factloom.platform.services.metrics_dir`), so the API's
``/metrics`` shows the workers' counts too; a worker on a machine of its own serves them on
``FACTLOOM_WORKER_METRICS_PORT`` (:mod:`factloom.workers.telemetry`). Gauges say how the processes'
values combine (``multiprocess_mode``). Without the variable, values live in this process's
:data:`REGISTRY`.

Importable from every layer but ``model/`` (tensor code only): it imports nothing of FactLoom.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess

__all__ = [
    "REGISTRY", "MULTIPROC_ENV", "multiprocess_dir", "multiprocess_registry", "mark_process_dead",
    "reset_multiprocess_dir",
    "REQUEST_SECONDS", "INGESTED", "FEEDBACK",
    "TASK_SECONDS", "CHECK_VERDICTS", "VERIFIER_CHECKS", "VERIFIER_ABSTENTIONS", "LEARN_UPDATES",
    "STORE_SECONDS", "ROUTER_ENTROPY",
    "SERVED_QUESTIONS", "SERVED_SECONDS", "SHADOW_AGREEMENT", "MODEL_FAILING_PERIODS", "MODEL_ROLLBACKS",
    "ALERTS_RECEIVED",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> Path | None:
    """The shared directory this process writes its values to; ``None`` in single-process mode."""
    value = os.environ.get(MULTIPROC_ENV)
    return Path(value) if value else None


def multiprocess_registry(path: Path | None = None) -> CollectorRegistry:
    """A registry that reads every process's values from the multiprocess directory (``path``,
    else :func:`multiprocess_dir`) at each scrape."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(path) if path else None)
    return registry


def mark_process_dead(pid: int) -> None:
    """Forget the live gauges (``live*`` modes) of a process that exited; a no-op in single-process mode."""
    shared = multiprocess_dir()
    if shared is not None:
        multiprocess.mark_process_dead(pid, str(shared))


def reset_multiprocess_dir(path: Path) -> None:
    """Make ``path`` an empty directory for a new set of processes (prometheus_client requires it:
    an earlier run's files would be summed in); only its ``*.db`` files are removed. Only while none
    of the processes that write there runs: one that does keeps writing to the file it has open."""
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink(missing_ok=True)


# a process started with the variable pointing at a directory nobody made would fail at its first count
if (_shared := multiprocess_dir()) is not None:
    _shared.mkdir(parents=True, exist_ok=True)

REGISTRY = CollectorRegistry()

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# a Celery task: a commit in milliseconds, a check chunk in seconds, a learn update in minutes
_TASK = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
# one Neo4j or SQL statement: a key lookup takes well under a millisecond, a 3-hop expansion tens of them
_ROUND_TRIP = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# nats: 0 is one relation for sure, ln 2 ≈ 0.69 two halves, ln R all R alike (ln 726 ≈ 6.6, PathQuestion)
_ENTROPY = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 6, 8)

# --- the API -------------------------------------------------------------------------------------

REQUEST_SECONDS = Histogram(
    "factloom_http_request_seconds", "HTTP request latency, by method, route template and status",
    ["method", "route", "status"], registry=REGISTRY, buckets=_LATENCY,
)
INGESTED = Counter("factloom_ingested_facts", "Fact submissions accepted into the ledger", registry=REGISTRY)
FEEDBACK = Counter("factloom_answer_feedback", "Answer feedback items recorded, by kb and whether the answer was right",
                   ["kb", "correct"], registry=REGISTRY)
ALERTS_RECEIVED = Counter(
    "factloom_alerts_received", "Alertmanager webhook notifications received by the API, by alert and status "
    "(firing, resolved)", ["alertname", "status"], registry=REGISTRY,
)

# --- the workers ---------------------------------------------------------------------------------

TASK_SECONDS = Histogram(
    "factloom_task_seconds", "Celery task run time, by queue, task name and outcome (success, failure, retry)",
    ["queue", "task", "outcome"], registry=REGISTRY, buckets=_TASK,
)
CHECK_VERDICTS = Counter(
    "factloom_check_verdicts", "Checked facts by kb and fused verdict (accepted, rejected, needs_review)",
    ["kb", "verdict"], registry=REGISTRY,
)
VERIFIER_CHECKS = Counter(
    "factloom_verifier_checks", "Facts each verifier judged or abstained on", ["verifier"], registry=REGISTRY,
)
VERIFIER_ABSTENTIONS = Counter(
    "factloom_verifier_abstentions", "Facts a verifier abstained on (no probability: nothing to judge with, "
    "or it failed)", ["verifier"], registry=REGISTRY,
)
LEARN_UPDATES = Counter(
    "factloom_learn_updates", "Continual learning update runs, by kb, kind (scorer, reasoner) and outcome "
    "(skipped, done, first, promoted, failed, busy, error)", ["kb", "kind", "outcome"], registry=REGISTRY,
)

# --- the stores ----------------------------------------------------------------------------------

STORE_SECONDS = Histogram(
    "factloom_store_seconds", "Round trip of one statement, by store (neo4j, ledger) and op (read, write)",
    ["store", "op"], registry=REGISTRY, buckets=_ROUND_TRIP,
)

# --- serving and the model lifecycle -------------------------------------------------------------

ROUTER_ENTROPY = Histogram(
    "factloom_router_attention_entropy", "Entropy (nats) of the router's relation distribution, per hop of each "
    "answered question", ["hop"], registry=REGISTRY, buckets=_ENTROPY,
)
SERVED_QUESTIONS = Counter(
    "factloom_served_questions", "Questions answered, by kb, model version and role (active, ab, shadow)",
    ["kb", "version", "role"], registry=REGISTRY,
)
SERVED_SECONDS = Histogram(
    "factloom_served_seconds", "Time to answer a question, by kb and role (active, ab, shadow)",
    ["kb", "role"], registry=REGISTRY, buckets=_LATENCY,
)
SHADOW_AGREEMENT = Counter(
    "factloom_shadow_agreement", "Shadow answers compared with the active version's, by kb, shadow version and "
    "whether their top answer agreed", ["kb", "version", "agree"], registry=REGISTRY,
)
# set (never incremented) by the monitor in whichever worker process ran the period: the latest wins
MODEL_FAILING_PERIODS = Gauge(
    "factloom_model_failing_periods", "Consecutive failing monitor periods of a kb's active model, by kind",
    ["kb", "kind"], registry=REGISTRY, multiprocess_mode="mostrecent",
)
MODEL_ROLLBACKS = Counter(
    "factloom_model_rollbacks", "Automatic rollbacks to the last good version, by kb and kind", ["kb", "kind"],
    registry=REGISTRY,
)
