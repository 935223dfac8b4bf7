"""Auth and bad input: a clear application/problem+json answer, and nothing written."""

from __future__ import annotations

import contextlib
import json
import re
import selectors
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import func, select, update

from factloom.config import Settings
from factloom.ledger import ApiKey, Database, FactSubmission, IngestBatch
from factloom.platform.auth.service import KEY_TTL_S, KeyCache, Principal
from tests.support.api import assert_problem

pytestmark = pytest.mark.integration

GOOD = {"subject": "Alien", "predicate": "directed_by", "object": "Ridley Scott"}


def ledger_rows(db: Database) -> tuple[int, int]:
    with db.session() as session:
        return (session.scalar(select(func.count()).select_from(IngestBatch)) or 0,
                session.scalar(select(func.count()).select_from(FactSubmission)) or 0)


def test_every_v1_route_needs_a_key(anonymous: httpx.Client) -> None:
    refused = anonymous.post("/v1/facts", json={"facts": [GOOD]})
    assert_problem(refused, 401, "missing API key")
    assert refused.headers["www-authenticate"] == "Bearer"
    wrong_scheme = anonymous.get("/v1/review", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert_problem(wrong_scheme, 401, "missing API key")
    assert_problem(anonymous.post("/v1/query", json={"question": "who directed [Alien]"}), 401, "missing API key")
    assert_problem(anonymous.get("/v1/review"), 401, "missing API key")
    bad = anonymous.get("/v1/review", headers={"Authorization": "Bearer fl_nothere_xyz"})
    assert_problem(bad, 401, "unknown or revoked")
    malformed = anonymous.get("/v1/review", headers={"Authorization": "Bearer nonsense"})
    assert_problem(malformed, 401, "malformed")
    assert malformed.headers["www-authenticate"] == "Bearer"


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
        ({"facts": [{**GOOD, "valid_to": 0}]}, 422, "facts.0.valid_to: Value error, expected an RFC 3339"),
        ({"facts": [{**GOOD, "valid_to": "1700000000"}]}, 422, "facts.0.valid_to"),
        ({"facts": [{**GOOD, "valid_to": "9999-12-31T23:59:59-14:00"}]}, 422, "out of range"),
        ({"facts": [{**GOOD, "valid_from": "0001-01-01T00:00:00+14:00"}]}, 422, "out of range"),
        ({"facts": [{**GOOD, "subject": "Ali\x00en"}]}, 422, "facts.0.subject: Value error, must not contain the "
                                                           "control character U+0000 (NUL)"),
        ({"facts": [{**GOOD, "object": "Ridley\x1bScott"}]}, 422, "facts.0.object: Value error, must not contain"),
        ({"facts": [{**GOOD, "predicate": "directed\x00by"}]}, 422, "facts.0.predicate"),
        ({"facts": [{**GOOD, "predicate": "directed\nby"}]}, 422, "a predicate is one line"),
        ({"facts": [{**GOOD, "source": "imdb\x07"}]}, 422, "facts.0.source"),
        ({"facts": [{**GOOD, "subject": " \t "}]}, 422, "at least 1 character other than spaces"),
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
    assert_problem(api.get("/v1/review", params={"status": "maybe"}), 422, "status")
    assert_problem(api.get("/v1/review", params={"status": "done"}), 422, "status")
    assert api.get("/v1/review", params={"status": "committed"}).status_code == 200
    assert_problem(api.get("/v1/review", params={"limit": 0}), 422, "limit")
    # an offset past what SQL can hold is refused at the edge; the deepest one it holds answers empty
    assert_problem(api.get("/v1/review", params={"offset": 2**62 + 1}), 422, "offset")
    assert api.get("/v1/review", params={"offset": 2**62}).json()["items"] == []
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


def _chunks(total: int, size: int = 1024 * 1024) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        sent += size
        yield b" " * size


def _send_chunked(settings: Settings, path: str, headers: dict[str, str], total: int) -> tuple[bytes, int]:
    """POST ``total`` bytes chunked (no Content-Length) on a raw socket, stopping as soon as the server
    answers; the answer's first bytes and how many body bytes were sent before it came."""
    url = httpx.URL(settings.base_url)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sent = 0
    with socket.create_connection((url.host, url.port), timeout=60) as sock, selectors.DefaultSelector() as readable:
        readable.register(sock, selectors.EVENT_READ)
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {url.host}\r\nTransfer-Encoding: chunked\r\n"
                     f"Content-Type: application/json\r\n{head}\r\n".encode())
        for chunk in _chunks(total):
            if readable.select(timeout=0):
                break  # the answer came before the body ended
            try:
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        else:
            with contextlib.suppress(OSError):
                sock.sendall(b"0\r\n\r\n")
        answer = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in answer or len(answer) < 200:
                part = sock.recv(65536)
                if not part:
                    break
                answer += part
    return answer, sent


def test_a_chunked_body_over_the_limit_is_refused_on_the_stream(
    api: httpx.Client, settings: Settings, db: Database,
) -> None:
    before = ledger_rows(db)
    answer, sent = _send_chunked(settings, "/v1/facts", {"Authorization": api.headers["authorization"]},
                                 50 * 1024 * 1024)
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"application/problem+json" in rest and b"request bodies are limited to 16777216 bytes" in rest
    # refused once past the limit, not after reading all 50 MB (the socket buffers hold a few MB more)
    assert sent < 40 * 1024 * 1024, sent
    assert ledger_rows(db) == before


def test_a_request_without_a_key_is_refused_before_its_body_is_read(settings: Settings, db: Database) -> None:
    before = ledger_rows(db)
    answer, sent = _send_chunked(settings, "/v1/facts", {}, 50 * 1024 * 1024)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert b"www-authenticate: Bearer" in answer.lower().replace(b"bearer", b"Bearer")
    assert sent < 16 * 1024 * 1024, sent  # not even the limit was read
    assert ledger_rows(db) == before


@pytest.mark.parametrize("as_of", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "9999-12-31T00:00:00Z",
                                   "2024-01-01", 0, "2024-01-01T00:00:00"])
def test_as_of_out_of_range_or_without_a_zone_is_refused(api: httpx.Client, as_of: object) -> None:
    response = api.post("/v1/query", json={"question": "who directed [Alien]", "as_of": as_of})
    assert_problem(response, 422, "as_of")


def test_as_of_near_the_ends_of_time_answers(api: httpx.Client) -> None:
    api.post("/v1/facts", json={"kb": "ends", "facts": [GOOD]})
    for as_of in ("9999-12-30T23:59:59-14:00", "0001-01-02T00:00:00+14:00", "2024-06-01T12:00:00+02:00"):
        response = api.post("/v1/query", json={"question": "who directed [Alien]", "kb": "ends", "as_of": as_of})
        assert response.status_code in (200, 404), response.text  # 404 until the kb holds the fact
        assert response.headers["content-type"].startswith("application/"), response.headers


def test_served_timestamps_carry_their_time_zone(api: httpx.Client, db: Database) -> None:
    offset = {**GOOD, "subject": "Aliens", "valid_from": "1986-07-18T09:00:00+09:00",
              "valid_to": "2099-01-01T00:00:00Z"}
    accepted = api.post("/v1/facts", json={"kb": "zones", "facts": [offset]})
    assert accepted.status_code == 202, accepted.text
    batch = api.get(f"/v1/batches/{accepted.json()['batch_id']}").json()
    with db.session() as session:
        [submission_id] = [r.id for r in session.query(FactSubmission).filter_by(batch_id=batch["batch_id"])]
    fact = api.get(f"/v1/facts/{submission_id}").json()
    # stored in UTC: the offset it was sent with is gone, the instant is not
    assert fact["valid_from"] == "1986-07-18T00:00:00Z" and fact["valid_to"] == "2099-01-01T00:00:00Z"
    for stamp in (batch["created_at"], fact["created_at"], fact["updated_at"]):
        assert datetime.fromisoformat(stamp).utcoffset() is not None, stamp


def test_405_names_every_method_of_the_path(api: httpx.Client) -> None:
    response = api.delete("/v1/feedback")
    assert_problem(response, 405, "Method Not Allowed")
    assert response.headers["allow"] == "GET, HEAD, POST"


def test_the_openapi_document_lists_each_problem(anonymous: httpx.Client) -> None:
    document = anonymous.get("/openapi.json").json()
    assert document["components"]["schemas"]["Problem"]["required"] == ["type", "title", "status", "detail",
                                                                         "instance"]
    assert "HTTPValidationError" not in document["components"]["schemas"]
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    operations = [(m, p, op) for p, item in document["paths"].items() if p.startswith("/v1/") for m, op in item.items()]
    assert len(operations) >= 10
    for method, path, operation in operations:
        assert operation["security"] == [{"bearer": []}], (method, path)
        responses = operation["responses"]
        for status in ("401", "403", "429", "503"):
            assert list(responses[status]["content"]) == ["application/problem+json"], (method, path, status)
        assert "WWW-Authenticate" in responses["401"]["headers"] and "Retry-After" in responses["503"]["headers"]
        if "requestBody" in operation:
            assert {"400", "413", "422"} <= set(responses), (method, path)
        if "{" in path:
            assert "404" in responses, (method, path)
    facts = document["paths"]["/v1/facts"]["post"]
    assert facts["responses"]["422"]["content"]["application/problem+json"]["schema"] == {
        "$ref": "#/components/schemas/Problem"}
    [status] = [p for p in document["paths"]["/v1/review"]["get"]["parameters"] if p["name"] == "status"]
    assert "done" not in str(status["schema"]) and "needs_review" in str(status["schema"])
    assert "409" in document["paths"]["/v1/review/{submission_id}"]["post"]["responses"]


def test_readiness_reuses_one_redis_connection_pool(anonymous: httpx.Client, settings: Settings) -> None:
    counter = redis.Redis.from_url(settings.redis_url)
    try:
        anonymous.get("/readyz")
        before = counter.info("stats")["total_connections_received"]
        for _ in range(40):
            ready = anonymous.get("/readyz")
            assert ready.status_code == 200 and ready.json()["down"] == []
        # the Celery processes may open one or two of their own meanwhile; a client per call opened 40
        assert counter.info("stats")["total_connections_received"] - before <= 5
    finally:
        counter.close()


def test_readiness_names_the_store_that_is_down(settings: Settings, live: object) -> None:
    from factloom.platform.resources import Resources
    from factloom.platform.system import readyz

    with socket.socket() as free:  # a port nothing listens on: a Redis that is down
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    resources = Resources.open(settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{port}/0"}))
    try:
        answer = readyz(resources)
    finally:
        resources.close()
    assert answer.status_code == 503
    assert json.loads(bytes(answer.body)) == {"ready": False, "checks": {"neo4j": True, "sql": True, "redis": False},
                                              "down": ["redis"]}


@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b'{"facts": [{"subject": "\xff\xfe"}]}', "application/json", 400),  # not UTF-8
        (b"[" * 100_000 + b"]" * 100_000, "application/json", 400),  # nested past any parser's stack
        (b'{"facts": [{"subject": "Alien", "predicate": "p", "object": "o"}]}', "text/plain", 422),
    ],
)
def test_unreadable_bodies_are_refused_as_problems(
    api: httpx.Client, db: Database, content: bytes, content_type: str, status: int,
) -> None:
    before = ledger_rows(db)
    response = api.post("/v1/facts", content=content, headers={"Content-Type": content_type})
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"] == "application/problem+json"
    assert ledger_rows(db) == before
