"""The running platform under load, driven by Locust (BENCHMARKS.md §5, issue: reliability and load).

Queries at each of ``--levels`` concurrent users for ``--seconds``; ingest at each of
``--ingest-levels`` concurrent pipelines posting ``--ingest-facts`` new facts in all (POSTs of
``--batch``), timed until every one is decided; then both at once (``--mixed``). Per level the
throughput, p50 / p95 / p99 latency, errors (anything but a 2xx, or a deliberate 429 / 503 with
Retry-After, which is counted as shed), and for ingest the facts checked and decided a second.
``--soak-minutes M`` then runs the mixed load for M minutes, each pipeline pausing
``--soak-pause`` seconds between POSTs (about what the checks keep up with), and samples the
resident memory of every platform process: growth after the first fifth (warm-up).

A PNG beside the JSON draws latency and throughput against users.
"""

from __future__ import annotations

import csv
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from _common import parser, running_platform, write_result
from query import load_questions

from factloom.config import DEFAULT_KB, get_settings

HERE = Path(__file__).resolve().parent


def _locust(users: dict[str, int], seconds: float, env: dict[str, str], base_url: str, work: Path) -> dict[str, Any]:
    """One headless Locust run of ``users`` (class name → count); its stats per request name."""
    prefix = work / f"run-{uuid.uuid4().hex[:6]}"
    total = sum(users.values())
    classes = [name for name, n in users.items() if n]
    command = [sys.executable, "-m", "locust", "-f", str(HERE / "_locustfile.py"), "--headless",
               "--host", base_url, "-u", str(total), "-r", str(max(1, total)), "-t", f"{int(seconds)}s",
               "--csv", str(prefix), "--only-summary", "--stop-timeout", "30", *classes]
    # a fixed number of each kind of user, not a share (the locustfile sets their fixed_count)
    environment = {**os.environ, **env, "FACTLOOM_LOAD_USERS": ",".join(f"{k}={v}" for k, v in users.items())}
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=seconds + 300)
    stats_file = Path(f"{prefix}_stats.csv")
    if not stats_file.exists():
        raise RuntimeError(f"locust wrote no stats (exit {done.returncode}):\n{done.stderr[-2000:]}")
    def ms(value: str) -> float:  # Locust writes N/A for a name without requests
        return float(value) if value not in ("", "N/A") else 0.0

    out: dict[str, Any] = {}
    with stats_file.open() as rows:
        for row in csv.DictReader(rows):
            key = row["Name"]  # a refusal's name is NAME:shed:WHY (bench/_locustfile.py)
            out[key] = {
                "requests": int(row["Request Count"]), "failures": int(row["Failure Count"]),
                "rps": round(float(row["Requests/s"]), 2),
                "latency_ms_p50": ms(row["50%"]), "latency_ms_p95": ms(row["95%"]), "latency_ms_p99": ms(row["99%"]),
            }
    failures = Path(f"{prefix}_failures.csv")
    if failures.exists():
        out["failure_kinds"] = [dict(r) for r in csv.DictReader(failures.open())][:10]
    return out


def _level(stats: dict[str, Any], name: str) -> dict[str, Any]:
    served = stats.get(name, {"requests": 0, "failures": 0, "rps": 0.0, "latency_ms_p50": 0.0,
                              "latency_ms_p95": 0.0, "latency_ms_p99": 0.0})
    why = {key.split(":shed:", 1)[1]: row["requests"] for key, row in stats.items()
           if key.startswith(f"{name}:shed:") and row["requests"]}
    return {**served, "served": served["requests"] - served["failures"], "errors": served["failures"],
            "shed": sum(why.values()), "shed_why": why}


def _committed_rate(db: Any, kb: str, started: float, timeout: float) -> dict[str, Any]:
    """Wait until ``kb`` has nothing left to check or commit; facts decided a second since ``started``."""
    from sqlalchemy import func, select

    from factloom.ledger import FactSubmission, Status

    waiting = [Status.pending, Status.checking, Status.accepted, Status.reviewed]
    deadline = time.monotonic() + timeout
    while True:
        with db.session() as session:
            counts = dict(session.execute(select(FactSubmission.status, func.count())
                                          .where(FactSubmission.kb == kb).group_by(FactSubmission.status)).all())
        left = sum(counts.get(s, 0) for s in waiting)
        if left == 0 or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    elapsed = time.perf_counter() - started
    decided = sum(counts.values()) - left
    return {"facts_submitted": sum(counts.values()), "facts_decided": decided, "facts_left": left,
            "committed": counts.get(Status.committed, 0), "drain_seconds": round(elapsed, 1),
            "decided_per_s": round(decided / elapsed, 1)}


class _Memory:
    """Resident memory of every platform process (each service with its children), sampled."""

    def __init__(self, settings: Any, every_s: float = 5.0) -> None:
        import psutil

        from factloom.platform.services import services

        self.pids = {name: s.pid() for name, s in services(settings).items() if s.pid()}
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._psutil, self._every, self._stop = psutil, every_s, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rss(self, pid: int) -> int:
        try:
            root = self._psutil.Process(pid)
            return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
        except self._psutil.Error:
            return 0

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(self._every):
            self.samples.append((time.monotonic() - t0, {n: self._rss(p) for n, p in self.pids.items()}))

    def __enter__(self) -> _Memory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def growth(self) -> dict[str, Any]:
        """Per process: RSS after warm-up (the first fifth) and at the end, growth as a fraction."""
        warm = self.samples[len(self.samples) // 5:]
        out: dict[str, Any] = {}
        for name in self.pids:
            start, end = warm[0][1][name], max(s[name] for _, s in warm[-3:])
            out[name] = {"rss_mb_after_warm_up": round(start / 2**20, 1), "rss_mb_end": round(end / 2**20, 1),
                         "growth": round(end / start - 1, 4) if start else None}
        return out


def _plot(path: Path, query_levels: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    users = [lv["users"] for lv in query_levels]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for q in ("p50", "p95", "p99"):
        left.plot(users, [lv[f"latency_ms_{q}"] for lv in query_levels], marker="o", label=q)
    left.set(xscale="log", yscale="log", xlabel="concurrent users", ylabel="latency (ms)", title="query latency")
    left.legend()
    right.plot(users, [lv["rps"] for lv in query_levels], marker="o")
    right.set(xscale="log", xlabel="concurrent users", ylabel="served questions / s", title="query throughput")
    for axis in (left, right):
        axis.set_xticks(users, [str(u) for u in users])
        axis.minorticks_off()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = parser("load", __doc__.splitlines()[0])
    p.add_argument("--kb", default=DEFAULT_KB, help="the kb questions are asked of (MetaQA questions: the demo kb)")
    p.add_argument("--levels", default="1,8,32,64,128", help="concurrent query users, comma separated")
    p.add_argument("--ingest-levels", default="1,4,16", help="concurrent ingest pipelines, comma separated")
    p.add_argument("--mixed", default="32,4", help="query users,ingest pipelines at once; '' for none")
    p.add_argument("--seconds", type=float, default=30.0, help="each query level's length, and the mixed run's")
    p.add_argument("--ingest-facts", type=int, default=10000, help="facts each ingest level posts in all")
    p.add_argument("--soak-pause", type=float, default=2.0, help="seconds each soak pipeline waits between POSTs")
    p.add_argument("--batch", type=int, default=100, help="facts a POST")
    p.add_argument("--drain-timeout", type=float, default=600.0, help="longest wait for an ingest backlog")
    p.add_argument("--soak-minutes", type=float, default=0.0, help="mixed load this long, memory sampled")
    p.add_argument("--split", default="test", help="recorded only: the questions are MetaQA dev questions")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    started = time.perf_counter()
    random.seed(args.seed)
    settings = get_settings()
    from factloom.ledger import Database

    db = Database(settings.sql_url)
    run = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        questions = work / "questions.txt"
        questions.write_text("\n".join(q for q, _, _ in load_questions(args.data_dir, [1, 2, 3], 300, args.seed)))
        base_url, key = running_platform(settings)
        env = {"FACTLOOM_LOAD_KEY": key, "FACTLOOM_LOAD_QUESTIONS": str(questions),
               "FACTLOOM_LOAD_QUERY_KB": args.kb, "FACTLOOM_LOAD_BATCH": str(args.batch)}
        metrics: dict[str, Any] = {"query": [], "ingest": [], "mixed": None, "soak": None}
        for users in [int(x) for x in args.levels.split(",") if x]:
            level = {"users": users, **_level(_locust({"QueryUser": users}, args.seconds, env, base_url,
                                                      work), "query")}
            metrics["query"].append(level)
            print(f"query  {users:>4} users  {level['rps']:>7} /s  p50 {level['latency_ms_p50']:>6} ms  "
                  f"p99 {level['latency_ms_p99']:>7} ms  errors {level['errors']}  shed {level['shed']}", flush=True)
        for pipelines in [int(x) for x in args.ingest_levels.split(",") if x]:
            kb = f"bench-load-{run}-{pipelines}"
            t0 = time.perf_counter()
            posts = {"FACTLOOM_LOAD_INGEST_POSTS": str(max(1, args.ingest_facts // args.batch)),
                     "FACTLOOM_LOAD_QUIT_AFTER_INGEST": "1"}
            stats = _locust({"IngestUser": pipelines}, args.drain_timeout,
                            {**env, **posts, "FACTLOOM_LOAD_INGEST_KB": kb}, base_url, work)
            level = {"pipelines": pipelines, **_level(stats, "ingest"),
                     **_committed_rate(db, kb, t0, args.drain_timeout)}
            metrics["ingest"].append(level)
            print(f"ingest {pipelines:>4} pipes  {level['rps']:>7} POST/s  p99 {level['latency_ms_p99']:>7} ms  "
                  f"errors {level['errors']}  shed {level['shed']}  decided {level['decided_per_s']} facts/s",
                  flush=True)
        if args.mixed:
            users, pipelines = (int(x) for x in args.mixed.split(","))
            kb = f"bench-load-{run}-mixed"
            t0 = time.perf_counter()
            posts = {"FACTLOOM_LOAD_INGEST_POSTS": str(max(1, args.ingest_facts // args.batch))}
            stats = _locust({"QueryUser": users, "IngestUser": pipelines}, args.seconds,
                            {**env, **posts, "FACTLOOM_LOAD_INGEST_KB": kb}, base_url, work)
            metrics["mixed"] = {"users": users, "pipelines": pipelines, "query": _level(stats, "query"),
                                "ingest": {**_level(stats, "ingest"),
                                           **_committed_rate(db, kb, t0, args.drain_timeout)}}
            print(f"mixed  {metrics['mixed']}", flush=True)
            if args.soak_minutes:
                kb = f"bench-load-{run}-soak"
                with _Memory(settings) as memory:
                    stats = _locust({"QueryUser": users, "IngestUser": pipelines}, args.soak_minutes * 60,
                                    {**env, "FACTLOOM_LOAD_INGEST_KB": kb,
                                     "FACTLOOM_LOAD_INGEST_PAUSE_S": str(args.soak_pause)}, base_url, work)
                metrics["soak"] = {"minutes": args.soak_minutes, "query": _level(stats, "query"),
                                   "ingest": _level(stats, "ingest"), "memory": memory.growth()}
                print(f"soak   {metrics['soak']}", flush=True)
    db.dispose()
    errors = sum(lv["errors"] for lv in metrics["query"] + metrics["ingest"])
    metrics["errors_total"] = errors
    by_users = {lv["users"]: lv for lv in metrics["query"]}
    if 8 in by_users and 64 in by_users and by_users[8]["latency_ms_p99"]:
        metrics["p99_64_over_8"] = round(by_users[64]["latency_ms_p99"] / by_users[8]["latency_ms_p99"], 2)
    write_result(args.out, benchmark="load", dataset="metaqa-dev+synthetic", split=args.split,
                 settings={k: v for k, v in vars(args).items() if k not in ("out", "data_dir")}, metrics=metrics,
                 started=started)
    if metrics["query"]:
        _plot(args.out.with_suffix(".png"), metrics["query"])


if __name__ == "__main__":
    main()
