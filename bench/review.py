"""The admin review queue's server time with a large queue beside a large graph's history.

Builds a ledger shaped like a busy demo kb: ``--waiting`` submissions waiting for review (value
clashes among rival values, self-loops, low plausibilities, each with its verifier results) beside
``--committed`` committed ones of the same kb, then asks the admin app (in process, real SQLite or
``--database-url``) for the queue's pages and views and reads the time the server spent on each from
its ``Server-Timing`` header. Neo4j is not needed: no queue view reads the graph.

    factloom bench review    # writes bench/results/review.json
"""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from _common import parser, percentile, write_result
from fastapi.testclient import TestClient
from sqlalchemy import insert

from factloom.config import DEFAULT_KB, Settings
from factloom.ledger import CheckResult, Database, FactSubmission, IngestBatch, Status
from factloom.platform.admin.users import create_user
from factloom.platform.app import create_app
from factloom.platform.migrate import migrate_sql

VERIFIERS = ("consistency", "corroboration", "plausibility", "text_evidence", "types")


def fill(db: Database, *, kb: str, waiting: int, committed: int, seed_time: datetime) -> None:
    """``committed`` settled facts and ``waiting`` review items of one kb, in batches of 10,000."""
    with db.session() as session:
        for b in range(0, waiting + committed, 10_000):
            session.add(IngestBatch(id=f"{b:032x}", kb=kb, count=min(10_000, waiting + committed - b),
                                    created_at=seed_time))
    chunk: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    for i in range(waiting + committed):
        waits = i < waiting
        subject = f"Film {i // 3 if waits else i}"  # waiting items come as rivals, three per film
        if waits and i % 5 == 4:
            reason, obj, predicate = "self_loop", subject, "similar_to"
        else:
            reason, obj, predicate = ("value_clash" if i % 7 else "low_plausibility"), str(1900 + i % 120), \
                "release_year"
        sid = uuid.uuid4().hex
        chunk.append({
            "id": sid, "batch_id": f"{(i // 10_000) * 10_000:032x}", "kb": kb, "key": sid, "fact_id": sid,
            "subject": subject, "predicate": predicate, "object": obj, "source": f"source-{i % 5}",
            "status": Status.needs_review if waits else Status.committed, "probability": (i * 37 % 100) / 100,
            "review_reason": reason if waits else None, "attempts": 1,
            "created_at": seed_time + timedelta(seconds=i), "updated_at": seed_time,
            "committed_at": None if waits else seed_time + timedelta(seconds=i + 1),
        })
        if waits:
            checks += [{"submission_id": sid, "verifier": v, "probability": None if v == "text_evidence" else 0.5,
                        "score": None, "explanation": "", "details": {}} for v in VERIFIERS]
        if len(chunk) == 10_000:
            _write(db, chunk, checks)
            chunk, checks = [], []
    _write(db, chunk, checks)


def _write(db: Database, rows: list[dict[str, Any]], checks: list[dict[str, Any]]) -> None:
    if not rows:
        return
    with db.session() as session:
        session.execute(insert(FactSubmission), rows)
        if checks:
            session.execute(insert(CheckResult), checks)


def server_ms(client: TestClient, path: str, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
        out.append(float(response.headers["server-timing"].split("dur=")[1]))
    return out


def main() -> None:
    p = parser("review", __doc__.splitlines()[0])
    p.add_argument("--waiting", type=int, default=10_000, help="items waiting for review")
    p.add_argument("--committed", type=int, default=120_000, help="settled submissions of the same kb")
    p.add_argument("--repeats", type=int, default=30, help="requests per view")
    p.add_argument("--database-url", default="", help="a PostgreSQL URL (default: a fresh SQLite file)")
    args = p.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        settings = Settings(_env_file=None, home=home, admin_secret="bench-" + "x" * 30,  # type: ignore[call-arg]
                            database_url=args.database_url, neo4j_uri="bolt://127.0.0.1:9",
                            redis_url="redis://127.0.0.1:9/0")
        migrate_sql(settings.sql_url)
        db = Database(settings.sql_url)
        t0 = time.perf_counter()
        fill(db, kb=DEFAULT_KB, waiting=args.waiting, committed=args.committed,
             seed_time=datetime.now(timezone.utc) - timedelta(days=3))
        print(f"ledger: {args.waiting} waiting beside {args.committed} committed in {time.perf_counter() - t0:.0f} s")
        create_user(db=db, name="bench", role="admin", password="bench-password")
        db.dispose()
        with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
            login = client.get("/admin/login").text
            token = re.search(r'name="csrf" value="([^"]+)"', login).group(1)  # type: ignore[union-attr]
            client.post("/admin/login", data={"name": "bench", "password": "bench-password", "csrf": token})
            first = client.get(f"/admin/queue?kb={DEFAULT_KB}").text
            deep = f"/admin/queue?kb={DEFAULT_KB}"
            for _ in range(20):  # twenty pages in, by the Next links
                found = re.search(r'rel="next" href="\?([^"]+)"', client.get(deep).text)
                if not found:
                    break
                deep = f"/admin/queue?{found.group(1).replace('&amp;', '&')}"
            assert "waiting for review" in first
            views = {
                "queue": f"/admin/queue?kb={DEFAULT_KB}",
                "queue_every_kb": "/admin/queue",
                "queue_page_21": deep,
                "least_likely_first": f"/admin/queue?kb={DEFAULT_KB}&sort=p_asc",
                "why_value_clash": f"/admin/queue?kb={DEFAULT_KB}&reason=value_clash",
                "grouped_by_why": f"/admin/queue?kb={DEFAULT_KB}&group=reason",
                "grouped_rival_values": f"/admin/queue?kb={DEFAULT_KB}&group=claim",
                "search": f"/admin/queue?kb={DEFAULT_KB}&q=film+12",
                "batches": f"/admin/batches?kb={DEFAULT_KB}",
            }
            metrics: dict[str, Any] = {}
            for name, path in views.items():
                times = server_ms(client, path, args.repeats)
                metrics[name] = {"server_ms_p50": round(percentile(times, 0.5), 1),
                                 "server_ms_p95": round(percentile(times, 0.95), 1), "requests": len(times)}
                print(f"{name:22s} p50 {percentile(times, 0.5):6.1f} ms  p95 {percentile(times, 0.95):6.1f} ms")
    write_result(args.out, benchmark="review", dataset="synthetic", split="-",
                 settings={"waiting": args.waiting, "committed": args.committed, "repeats": args.repeats,
                           "database": "postgresql" if args.database_url else "sqlite"},
                 metrics={"views": metrics, "waiting": args.waiting, "committed": args.committed}, started=started)


if __name__ == "__main__":
    main()
