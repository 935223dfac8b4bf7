"""Prometheus metrics: the catalogue's names, the workers' counts reaching the API's /metrics through
the shared multiprocess directory, a worker's own metrics port, and the router's attention entropy."""

from __future__ import annotations

import logging
import math
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
import torch
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from factloom import metrics
from factloom.config import Settings
from factloom.graph.types import Edge, Seed, Subgraph
from factloom.ledger import Status
from factloom.model.embedder import Embedder
from factloom.model.features import RelationFeatures, collate, make_sample, question_inputs
from factloom.model.pipeline import PLAN_MIN_HOP_MASS, LearnedPipeline
from factloom.model.precision import PrecisionPolicy
from factloom.model.reasoner import PathReasoner, ReasonerConfig
from factloom.model.router import RelationRouter, RouterConfig, relation_entropy
from factloom.platform.process import Service
from factloom.platform.services import metrics_dir
from factloom.workers import learning
from factloom.workers.context import WorkerContext
from factloom.workers.telemetry import serve_metrics
from tests.support.api import facts, wait_batch

ROOT = Path(__file__).resolve().parents[2]

# the catalogue (docs/operations.md, "Metrics"): the contract with the alert rules and the dashboard
CATALOGUE: dict[str, tuple[type, tuple[str, ...]]] = {
    "factloom_http_request_seconds": (Histogram, ("method", "route", "status")),
    "factloom_ingested_facts": (Counter, ()),
    "factloom_answer_feedback": (Counter, ("kb", "correct")),
    "factloom_task_seconds": (Histogram, ("queue", "task", "outcome")),
    "factloom_check_verdicts": (Counter, ("kb", "verdict")),
    "factloom_verifier_checks": (Counter, ("verifier",)),
    "factloom_verifier_abstentions": (Counter, ("verifier",)),
    "factloom_learn_updates": (Counter, ("kb", "kind", "outcome")),
    "factloom_store_seconds": (Histogram, ("store", "op")),
    "factloom_router_attention_entropy": (Histogram, ("hop",)),
    "factloom_served_questions": (Counter, ("kb", "version", "role")),
    "factloom_served_seconds": (Histogram, ("kb", "role")),
    "factloom_shadow_agreement": (Counter, ("kb", "version", "agree")),
    "factloom_model_failing_periods": (Gauge, ("kb", "kind")),
    "factloom_model_rollbacks": (Counter, ("kb", "kind")),
    "factloom_alerts_received": (Counter, ("alertname", "status")),
}
# read at scrape time by the API (factloom.platform.metrics.LedgerCollector), not defined in factloom.metrics
SCRAPE_GAUGES = {"factloom_submissions", "factloom_queue_depth", "factloom_certified_error_bound",
                 "factloom_certification_target", "factloom_audit_error", "factloom_automation_ratio",
                 "factloom_audit_backlog"}
SUFFIXES = {Counter: ("_total",), Histogram: ("_bucket", "_sum", "_count"), Gauge: ("",)}


def defined() -> dict[str, tuple[type, tuple[str, ...]]]:
    found = {}
    for value in vars(metrics).values():
        if isinstance(value, Counter | Gauge | Histogram):
            found[value._name] = (type(value), tuple(value._labelnames))
    return found


def exposed_names() -> set[str]:
    """Every series name a scrape can show: the catalogue's with their type's suffixes."""
    return {name + suffix for name, (kind, _) in defined().items() for suffix in SUFFIXES[kind]} | SCRAPE_GAUGES


def test_factloom_metrics_defines_the_catalogue_exactly() -> None:
    assert defined() == CATALOGUE


def test_the_alert_rules_and_dashboards_name_only_defined_metrics() -> None:
    deploy = ROOT / "deploy"
    files = sorted((deploy / "prometheus").glob("*.yml")) + sorted((deploy / "grafana").rglob("*.json"))
    used: dict[str, set[str]] = {}
    for path in files:
        for name in re.findall(r"\bfactloom_[a-z0-9_]+", path.read_text()):
            used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    if not used:
        pytest.skip("no deploy/prometheus/*.yml or deploy/grafana/**/*.json names a factloom_ metric yet")
    unknown = {name: sorted(where) for name, where in used.items() if name not in exposed_names()}
    assert not unknown, f"metrics the rules or dashboards read but nothing records: {unknown}"


# --- the workers' counts on the API's /metrics -----------------------------------------------------

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    return sum(v for (n, have), v in samples.items() if n == name and set(labels.items()) <= have)


CHECK_TASK = ("factloom_task_seconds_count",
              frozenset({"queue": "check", "task": "factloom.check.submissions", "outcome": "success"}.items()))


def scrape_until(get: Callable[[], str], done: Callable[[Samples], bool], timeout: float = 10.0) -> Samples:
    """A scrape once ``done`` holds (or after ``timeout``): the ledger says a batch is decided a moment
    before the task that decided it returns, and its run time is recorded."""
    deadline = time.monotonic() + timeout
    while True:
        found = scrape(get())
        if done(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.fixture(scope="module")
def before(anonymous: httpx.Client) -> Samples:
    return scrape(anonymous.get("/metrics").text)


def test_the_api_metrics_show_what_the_worker_checked(api: httpx.Client, anonymous: httpx.Client,
                                                       settings: Settings, before: Samples) -> None:
    kb = "metrics-e2e"
    rows = [(f"Film {i}", "directed_by", f"Director {i}") for i in range(6)]
    contradiction = [("Film 0", "release_year", "1999"), ("Film 0", "release_year", "2001")]
    response = api.post("/v1/facts", json={"kb": kb, "facts": facts(rows + contradiction, source="metrics-test")})
    assert response.status_code == 202, response.text
    done = wait_batch(api, response.json()["batch_id"])
    decided = {s.value: done["counts"].get(s.value, 0)
               for s in (Status.committed, Status.rejected, Status.needs_review)}
    checked = before.get(CHECK_TASK, 0.0)
    after = scrape_until(lambda: anonymous.get("/metrics").text, lambda found: found.get(CHECK_TASK, 0.0) > checked)

    # the verdicts the worker counted: the ledger's vocabulary (a committed fact was accepted first)
    verdicts = {v: value(after, "factloom_check_verdicts_total", kb=kb, verdict=v)
                for v in ("accepted", "rejected", "needs_review")}
    assert verdicts == {"accepted": decided["committed"], "rejected": decided["rejected"],
                        "needs_review": decided["needs_review"]}
    assert sum(verdicts.values()) == len(rows) + len(contradiction)

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    # the check tasks the worker ran (the API runs none: these came through the shared directory)
    assert grew("factloom_task_seconds_count", queue="check", task="factloom.check.submissions", outcome="success") >= 1
    assert grew("factloom_task_seconds_bucket", queue="check", le="+Inf") >= 1
    # every verifier judged each fact; without an image model or a scorer two of them abstain on all
    n = len(rows) + len(contradiction)
    for verifier in ("consistency", "types", "corroboration", "plausibility", "text_evidence", "image_evidence"):
        assert grew("factloom_verifier_checks_total", verifier=verifier) >= n, verifier
    for silent in ("plausibility", "image_evidence"):
        assert grew("factloom_verifier_abstentions_total", verifier=silent) >= n, silent
    assert grew("factloom_verifier_abstentions_total", verifier="consistency") == 0
    # round trips: the worker wrote the accepted facts to Neo4j; everyone read and wrote the ledger
    for store, op in (("neo4j", "read"), ("neo4j", "write"), ("ledger", "read"), ("ledger", "write")):
        assert grew("factloom_store_seconds_count", store=store, op=op) >= 1, (store, op)
    # and the API's own: the POST, the gauges read at scrape time
    assert grew("factloom_http_request_seconds_count", route="/v1/facts", method="POST") >= 1
    assert ("factloom_queue_depth", frozenset({("queue", "check")})) in after
    # each process writes files of its own in the one directory: the API's two and the workers'
    owners = {int(p.stem.rsplit("_", 1)[1]) for p in metrics_dir(settings).glob("*.db")}
    assert len(owners) >= 3, owners


def test_learn_updates_are_counted_by_outcome(settings: Settings, live: dict[str, Service]) -> None:
    kb = "metrics-learn"
    ctx = WorkerContext(settings)

    def count(outcome: str) -> float:
        return metrics.LEARN_UPDATES.labels(kb, "scorer", outcome)._value.get()

    skipped, busy = count("skipped"), count("busy")
    assert learning.update(ctx, kb, "scorer")["result"] == "skipped"  # nothing committed in this kb
    with learning.held(ctx.redis, learning.lock_name(kb, "scorer"), 10.0):
        assert learning.update(ctx, kb, "scorer")["result"] == "busy"
    assert (count("skipped"), count("busy")) == (skipped + 1, busy + 1)
    with pytest.raises(ValueError, match="nothing to learn"):
        learning.update(ctx, kb, "poem")
    ctx.db.dispose()


# --- a worker's own metrics port -------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_worker_serves_every_process_metrics_on_its_port(
    api: httpx.Client, settings: Settings, worker_with: Callable[..., AbstractContextManager[Service]],
) -> None:
    port = free_port()
    with worker_with(worker_metrics_port=port):
        one = facts([("Film P", "directed_by", "Ann")])
        response = api.post("/v1/facts", json={"kb": "metrics-port", "facts": one})
        assert response.status_code == 202, response.text
        wait_batch(api, response.json()["batch_id"])
        served = scrape_until(lambda: httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text,
                              lambda found: found.get(CHECK_TASK, 0.0) >= 1)
    assert value(served, "factloom_check_verdicts_total", kb="metrics-port", verdict="accepted") == 1
    assert served.get(CHECK_TASK, 0.0) >= 1
    # the shared directory holds the API's counts too
    assert total(served, "factloom_http_request_seconds_count", route="/v1/facts") >= 1


def test_serve_metrics_reads_the_directory_it_is_given(settings: Settings, live: dict[str, Service]) -> None:
    port = free_port()
    server = serve_metrics(port, "127.0.0.1", path=metrics_dir(settings))
    assert server is not None
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert "factloom_http_request_seconds_count" in text  # the session's API processes wrote them
        assert serve_metrics(port, "127.0.0.1", path=metrics_dir(settings)) is None  # the port is taken
    finally:
        server.shutdown()
        server.server_close()


def test_serve_metrics_refuses_without_a_multiprocess_directory(caplog: pytest.LogCaptureFixture) -> None:
    assert metrics.multiprocess_dir() is None  # the test process counts in its own registry
    with caplog.at_level(logging.ERROR, logger="factloom.workers.telemetry"):
        assert serve_metrics(free_port(), "127.0.0.1") is None
    assert "PROMETHEUS_MULTIPROC_DIR" in caplog.text


# --- the router's attention entropy ----------------------------------------------------------------

def test_relation_entropy_in_nats() -> None:
    inf = float("-inf")
    logits = torch.tensor([[0.0, 0.0, inf, inf], [1.0, 1.0, 1.0, 1.0], [50.0, 0.0, 0.0, inf], [inf] * 4])
    assert relation_entropy(logits).tolist() == pytest.approx([math.log(2), math.log(4), 0.0, 0.0], abs=1e-6)
    p = torch.softmax(torch.tensor([2.0, 1.0, 0.5]), dim=-1)
    assert float(relation_entropy(torch.tensor([2.0, 1.0, 0.5]))) == pytest.approx(float(-(p * p.log()).sum()))


TRIPLES = [("anna", "spouse", "bob"), ("bob", "place_of_birth", "york"), ("anna", "children", "dan"),
           ("dan", "place_of_birth", "hull"), ("bob", "parents", "carl")]
IDS = {n: f"e-{n}" for n in dict.fromkeys(x for s, _, o in TRIPLES for x in (s, o))}


@pytest.fixture(scope="module")
def embedder() -> Iterator[Embedder]:
    yield Embedder(None, device="cpu")


def test_results_carry_the_routers_entropy_per_hop(embedder: Embedder) -> None:
    torch.manual_seed(0)
    edges = [Edge(f"f{i}", IDS[s], IDS[o], p) for i, (s, p, o) in enumerate(TRIPLES)]
    names = {v: k for k, v in IDS.items()}
    questions = ["where was the spouse of [anna] born", "who is the child of [anna]"]
    inputs = [question_inputs(embedder, q, ["anna"]) for q in questions]
    samples = [make_sample(q, v, Subgraph(seeds=[Seed(IDS["anna"], "anna", 1.0, "exact")], names=names, edges=edges),
                           qtok=t) for q, (v, t) in zip(questions, inputs, strict=True)]
    bare = make_sample("who is [nobody]", inputs[0][0], Subgraph(seeds=[], names={}, edges=[]), qtok=inputs[0][1])
    features = RelationFeatures(embedder.encode)
    router = RelationRouter(RouterConfig(hidden=32)).eval()
    reasoner = PathReasoner(ReasonerConfig(hidden=32)).eval()
    pipeline = LearnedPipeline(router, reasoner, features, PrecisionPolicy(mode="fp32"))

    # routed: over each candidate graph's relations, for the hops the question asks for
    routed = pipeline.run([*samples, bare], top_k=1, max_hops=3)
    with torch.no_grad():
        out = router(collate(samples, features))
    assert out.logits is not None and out.stop is not None
    needed = out.stop.flip(-1).cumsum(-1).flip(-1)
    for i, result in enumerate(routed[:2]):
        depth = max(1, int((needed[i] >= PLAN_MIN_HOP_MASS).sum()))
        assert result.attention_entropy == pytest.approx(relation_entropy(out.logits[i, :depth]).tolist(), abs=1e-5)
        # 4 predicates in the graph, each read both ways
        assert all(0.0 <= h <= math.log(2 * 4) + 1e-6 for h in result.attention_entropy)
    assert routed[2].attention_entropy == []  # nothing to route

    # planned: over the kb's relation vocabulary, as the plan scored it
    predicates = sorted({p for _, p, _ in TRIPLES})
    plan = pipeline.plan([v for v, _ in inputs], [t for _, t in inputs], predicates, max_hops=3)
    planned = pipeline.run(samples, top_k=1, max_hops=3, planned=[True, True])
    for i, result in enumerate(planned):
        expected = relation_entropy(plan.logits[i, : plan.depth[i]]).tolist()
        assert result.attention_entropy == pytest.approx(expected, abs=1e-5) and len(expected) == plan.depth[i]
        assert all(0.0 <= h <= math.log(2 * len(predicates)) + 1e-6 for h in result.attention_entropy)

    # no router: the reasoner reads the candidates, nothing to measure
    alone = LearnedPipeline(None, reasoner, features, PrecisionPolicy(mode="fp32"))
    assert [r.attention_entropy for r in alone.run(samples, top_k=1, max_hops=3)] == [[], []]


def test_the_metric_catalogue_is_documented() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    documented = {name + ("_total" if kind is Counter else "") for name, (kind, _) in defined().items()} | SCRAPE_GAUGES
    missing = sorted(name for name in documented if f"`{name}" not in text)
    assert not missing, f"docs/operations.md's Metrics table lacks {missing}"
