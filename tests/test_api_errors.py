"""Auth and bad input: a clear application/problem+json answer, and nothing written."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import func, select, update

from factloom.config import Settings
from factloom.ledger import ApiKey, Database, FactSubmission, IngestBatch
from factloom.platform.auth.service import KEY_TTL_S, KeyCache, Principal

pytestmark = pytest.mark.integration

GOOD = {"subject": "Alien", "predicate": "directed_by", "object": "Ridley Scott"}


def ledger_rows(db: Database) -> tuple[int, int]:
    with db.session() as session:
        return (session.scalar(select(func.count()).select_from(IngestBatch)) or 0,
                session.scalar(select(func.count()).select_from(FactSubmission)) or 0)


def assert_problem(response: httpx.Response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and fragment in body["detail"], body


def test_every_v1_route_needs_a_key(anonymous: httpx.Client) -> None:
    assert_problem(anonymous.post("/v1/facts", json={"facts": [GOOD]}), 401, "missing API key")
    assert_problem(anonymous.post("/v1/query", json={"question": "who directed [Alien]"}), 401, "missing API key")
    assert_problem(anonymous.get("/v1/review"), 401, "missing API key")
    bad = anonymous.get("/v1/review", headers={"Authorization": "Bearer fl_nothere_xyz"})
    assert_problem(bad, 401, "unknown or revoked")
    assert_problem(anonymous.get("/v1/review", headers={"Authorization": "Bearer nonsense"}), 401, "malformed")


def test_a_key_needs_the_route_scope(client_with: Callable[[str], httpx.Client], db: Database) -> None:
    before = ledger_rows(db)
    query_only = client_with("query")
    assert_problem(query_only.post("/v1/facts", json={"facts": [GOOD]}), 403, "'ingest' scope")
    assert_problem(query_only.get("/v1/review"), 403, "'review' scope")
    assert_problem(query_only.post("/v1/keys", json={"name": "x", "scopes": ["query"]}), 403, "'admin' scope")
    ingest_only = client_with("ingest")
    assert_problem(ingest_only.post("/v1/query", json={"question": "who directed [Alien]"}), 403, "'query' scope")
    assert ledger_rows(db) == before


def test_the_key_cache_forgets_a_key_after_its_ttl() -> None:
    cache = KeyCache(ttl=0.2, size=2)
    who = Principal(key_id="k1", name="reader", scopes=frozenset({"query"}))
    assert cache.get("fl_a_secret") is None
    cache.put("fl_a_secret", who)
    assert cache.get("fl_a_secret") == who and cache.get("fl_a_other") is None
    time.sleep(0.25)
    assert cache.get("fl_a_secret") is None
    cache.put("fl_a_secret", who)
    cache.put("fl_b_secret", who)
    cache.put("fl_c_secret", who)  # full: it starts afresh rather than grow
    assert cache.get("fl_a_secret") is None and cache.get("fl_c_secret") == who


def test_a_key_revoked_in_the_ledger_is_refused_within_the_cache_ttl(
    client_with: Callable[[str], httpx.Client], db: Database,
) -> None:
    client = client_with("review")
    for _ in range(4):  # both API processes verify the key and keep it
        assert client.get("/v1/review").status_code == 200
    prefix = client.headers["authorization"].split("_")[1]
    with db.session() as session:
        session.execute(update(ApiKey).where(ApiKey.prefix == prefix).values(revoked_at=datetime.now(UTC)))
    time.sleep(KEY_TTL_S + 0.5)
    for _ in range(4):
        assert_problem(client.get("/v1/review"), 401, "unknown or revoked")


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ('{"facts": [', 400, "not valid JSON"),
        ({"facts": [{"subject": "Alien", "predicate": "directed_by"}]}, 422, "facts.0.object"),
        ({"facts": [{**GOOD, "subject": 42}]}, 422, "facts.0.subject"),
        ({"facts": [{**GOOD, "valid_from": "yesterday"}]}, 422, "facts.0.valid_from"),
        ({"facts": [{**GOOD, "valid_from": "2024-01-01T00:00:00"}]}, 422, "time zone"),
        ({"facts": [{**GOOD, "subject": "x" * 1001}]}, 422, "at most 1000"),
        ({"facts": [{**GOOD, "evidence": {"text": "y" * 10_001}}]}, 422, "at most 10000"),
        ({"facts": [{**GOOD, "colour": "red"}]}, 422, "facts.0.colour"),
        ({"facts": []}, 422, "facts"),
        ({"kb": "no spaces allowed", "facts": [GOOD]}, 422, "kb"),
        ({"facts": [GOOD] * 1001}, 413, "at most 1000 facts"),
        # one bad fact fails the whole batch: the good one before it is not written either
        ({"facts": [GOOD, {**GOOD, "predicate": ""}]}, 422, "facts.1.predicate"),
    ],
)
def test_bad_input_is_refused_whole(api: httpx.Client, db: Database, body: object, status: int, fragment: str) -> None:
    before = ledger_rows(db)
    if isinstance(body, str):
        response = api.post("/v1/facts", content=body, headers={"content-type": "application/json"})
    else:
        response = api.post("/v1/facts", json=body)
    assert_problem(response, status, fragment)
    assert ledger_rows(db) == before


def test_other_bad_input(api: httpx.Client) -> None:
    assert_problem(api.post("/v1/keys", json={"name": "x", "scopes": ["query", "root"]}), 400, "unknown scope(s) root")
    assert_problem(api.get("/v1/review", params={"status": "maybe"}), 400, "unknown status")
    assert_problem(api.get("/v1/review", params={"limit": 0}), 422, "limit")
    assert_problem(api.get("/v1/facts/doesnotexist"), 404, "no submission")
    assert_problem(api.get("/v1/batches/doesnotexist"), 404, "no batch")
    assert_problem(api.post("/v1/review/doesnotexist", json={"decision": "accept"}), 404, "no submission")
    assert_problem(api.post("/v1/review/x", json={"decision": "maybe"}), 422, "decision")
    assert_problem(api.post("/v1/query", json={"question": ""}), 422, "question")
    assert_problem(api.post("/v1/query", json={"question": "who directed [Alien]", "kb": "no-such-kb"}), 404,
                   "knowledge base 'no-such-kb' holds no entities")
    assert_problem(api.get("/v1/nothing"), 404, "Not Found")


def test_keys_created_by_admin_work(api: httpx.Client, anonymous: httpx.Client) -> None:
    created = api.post("/v1/keys", json={"name": "reviewer-1", "scopes": ["review"]})
    assert created.status_code == 201
    token = created.json()["key"]
    ok = anonymous.get("/v1/review", headers={"Authorization": f"Bearer {token}"})
    assert ok.status_code == 200


def test_health_readiness_and_metrics(anonymous: httpx.Client) -> None:
    assert anonymous.get("/healthz").json()["status"] == "ok"
    ready = anonymous.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"neo4j": True, "sql": True, "redis": True}
    text = anonymous.get("/metrics").text
    for metric in ("factloom_http_request_seconds_bucket", "factloom_submissions", "factloom_queue_depth",
                   "factloom_ingested_facts_total"):
        assert metric in text
    # each request is timed under its route and status
    assert 'method="GET",route="/readyz",status="200"' in text


def test_metrics_count_the_requests_of_every_api_process(
    anonymous: httpx.Client, settings: Settings, tmp_path: Path
) -> None:
    # the session's API runs FACTLOOM_API_WORKERS processes (the default, 2): whichever answers the
    # scrape, it reports the requests all of them served, not only its own
    assert settings.api_workers == 2
    shared = settings.home / "run" / f"metrics-{settings.api_port}"
    count = re.compile(r'factloom_http_request_seconds_count\{method="GET",route="/healthz",status="200"\} (\S+)')

    def healthz_count(text: str) -> float:
        found = count.search(text)
        return float(found.group(1)) if found else 0.0

    def per_process() -> dict[str, float]:  # each process's own file, read on its own
        counts = {}
        for path in shared.glob("histogram_*.db"):
            alone = tmp_path / path.stem
            alone.mkdir(exist_ok=True)
            shutil.copy(path, alone / path.name)
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(alone))
            counts[path.stem] = healthz_count(generate_latest(registry).decode())
        return counts

    def healthz(_: int) -> bool:  # a new connection each time, so the kernel hands them to both processes
        return httpx.get(f"{settings.base_url}/healthz", timeout=30).status_code == 200

    with ThreadPoolExecutor(8) as pool:
        for _ in range(10):
            assert all(pool.map(healthz, range(40)))
            if sum(n > 0 for n in per_process().values()) >= 2:
                break
    counts = per_process()
    assert sum(n > 0 for n in counts.values()) == 2, f"the requests all went to one API process: {counts}"
    assert [healthz_count(anonymous.get("/metrics").text) for _ in range(4)] == [sum(counts.values())] * 4


def test_a_body_over_the_limit_is_refused_before_it_is_read(anonymous: httpx.Client, db: Database) -> None:
    before = ledger_rows(db)
    big = b" " * (16 * 1024 * 1024 + 1)
    response = anonymous.post("/v1/facts", content=big, headers={"Content-Type": "application/json"})
    assert_problem(response, 413, "request bodies are limited to 16777216 bytes")
    assert ledger_rows(db) == before
