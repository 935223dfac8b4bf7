"""Model swaps under load (issue 31): 8 clients, each with its own API key, ask a kb MetaQA questions
while a candidate reasoner goes shadow → A/B → active, and then a broken version is activated and
the monitor rolls it back by itself.

Reports failed requests (goal 0); the p95 latency in the 10 s after each swap (shadow, A/B, active,
rollback served) against the 10 s before it, and the rollback's against the steady state before the
first swap (goal ≤ 1.2×); and the time from the monitor's third failing period to the rollback
being served (goal ≤ one period + 10 s). While the broken version is active the training-free
baseline answers; its latency is reported apart.

It needs the running platform (``factloom up``) with learned models on the kb. For the length of
the run it swaps the platform's worker and beat for ones whose monitor looks every ``--period``
seconds, and puts the originals back afterwards. The candidate is a copy of the active reasoner's
artefact registered as a new version (the swap machinery is what is measured, not a new model).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from datetime import timezone
from pathlib import Path
from typing import Any

from _common import LoadClient, client, percentile, parser, write_result

from factloom.client import ApiError
from factloom.config import DEFAULT_KB, get_settings


def questions(data_dir: Path, n: int, seed: int) -> list[str]:
    lines = (data_dir / "metaqa" / "qa_1hop_dev.txt").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in random.Random(seed).sample(lines, n)]


class Traffic:
    """``clients`` threads asking questions in a loop, each with its own key; every request is kept
    as (start, latency ms, ok, reasoner version)."""

    def __init__(self, base_url: str, keys: list[str], kb: str, asked: list[str]) -> None:
        self.clients = [LoadClient(base_url, key) for key in keys]
        self.kb, self.asked = kb, asked
        self.log: list[tuple[float, float, bool, str]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(c, i), daemon=True)
                         for i, c in enumerate(self.clients)]

    def _run(self, api: LoadClient, seed: int) -> None:
        rng = random.Random(seed)
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                body = api.query(rng.choice(self.asked), kb=self.kb, top_k=1)
                entry = (t0, (time.monotonic() - t0) * 1000, True, str(body["model_versions"]["reasoner"]))
            except (ApiError, OSError) as exc:
                entry = (t0, (time.monotonic() - t0) * 1000, False, "")
                with self._lock:
                    self.errors.append(repr(exc)[:200])
            with self._lock:
                self.log.append(entry)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def window(self, start: float, end: float) -> list[tuple[float, float, bool, str]]:
        with self._lock:
            return [e for e in self.log if start <= e[0] < end]


def summary(entries: list[tuple[float, float, bool, str]], candidate: str) -> dict[str, Any]:
    latencies = [e[1] for e in entries if e[2]]
    return {"requests": len(entries), "failed": sum(not e[2] for e in entries),
            "latency_ms_p50": round(percentile(latencies, 0.5), 1),
            "latency_ms_p95": round(percentile(latencies, 0.95), 1),
            "candidate_share": round(sum(e[3] == candidate for e in entries) / max(len(entries), 1), 3)}


def main() -> None:
    p = parser("swap", __doc__ or "")
    p.add_argument("--split", default="test", help="kept for the common interface (MetaQA dev questions are asked)")
    p.add_argument("--kb", default=DEFAULT_KB)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--phase", type=float, default=12.0, help="seconds of each phase (steady, shadow, A/B, active)")
    p.add_argument("--warm-up", type=float, default=15.0,
                   help="seconds of traffic before the steady phase (caches fill, the swapped worker settles)")
    p.add_argument("--share", type=float, default=0.1, help="the A/B share")
    p.add_argument("--period", type=float, default=5.0, help="the monitor's period during the run, seconds")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    started = time.perf_counter()
    settings = get_settings()
    admin = client(settings)
    from factloom.platform.services import services

    active = next((m for m in admin.models(kind="reasoner", kb=args.kb) if m["status"] == "active"), None)
    if active is None:
        raise SystemExit(f"kb {args.kb!r} has no active learned reasoner: let the demo learn first (factloom status)")
    asked = questions(args.data_dir, 500, args.seed)

    from factloom.learn.serving import in_ab
    from factloom.ledger import Database, register_version

    db = Database(settings.sql_url)
    work = Path(tempfile.mkdtemp(prefix="bench-swap-", dir=settings.home))
    copy = work / "candidate.pt"
    shutil.copyfile(active["artefact"], copy)
    candidate = register_version(db, kind="reasoner", kb=args.kb, artefact=copy, metrics={"note": "bench swap"},
                                 parent=active["version"], activate=False)
    # the clients' keys: as many inside the A/B share as the share asks for (at least one), drawn
    # until found (a key's side is a hash of its id and the version)
    inside = max(1, round(args.share * args.clients))
    keys: list[str] = []
    made_ids: list[str] = []
    while len(keys) < args.clients:
        made = admin.create_key(f"bench-swap-{len(keys)}", ["query"])
        made_ids.append(made["id"])
        if in_ab(made["id"], candidate, args.share) == (len(keys) < inside):
            keys.append(made["key"])
    (work / "broken.pt").write_bytes(b"a deliberately broken model")

    found = services(settings.model_copy(update={"monitor_period_s": args.period, "monitor_min_questions": 5}))
    originals = services(settings)
    for name in ("beat", "worker"):
        originals[name].stop()
    for name in ("worker", "beat"):
        found[name].start()
    traffic = Traffic(settings.base_url, keys, args.kb, asked)
    marks: dict[str, float] = {}
    broken = ""
    try:
        traffic.start()
        time.sleep(args.warm_up + args.phase)
        marks["shadow"] = time.monotonic()
        admin.trial(candidate, "shadow")
        time.sleep(args.phase)
        marks["ab"] = time.monotonic()
        admin.trial(candidate, "ab", share=args.share)
        time.sleep(args.phase)
        marks["active"] = time.monotonic()
        admin.activate(candidate)
        time.sleep(args.phase)
        marks["broken"] = time.monotonic()
        broken = register_version(db, kind="reasoner", kb=args.kb, artefact=work / "broken.pt", metrics={},
                                  parent=candidate)
        deadline = time.monotonic() + 20 * args.period + 60
        rollback: dict[str, Any] | None = None
        while rollback is None and time.monotonic() < deadline:
            time.sleep(0.2)
            rollback = next((m for m in admin.models(kind="reasoner", kb=args.kb, limit=10)
                             if m["version"] == broken and m["status"] == "rolled_back"), None)
        marks["rolled_back_seen"] = time.monotonic()
        served_again = None
        while served_again is None and time.monotonic() < deadline:
            time.sleep(0.1)
            served_again = next((e[0] for e in traffic.window(marks["rolled_back_seen"] - args.period - 10,
                                                                time.monotonic())
                                 if e[3] == candidate and e[0] > marks["broken"] + args.period), None)
        time.sleep(args.phase / 2)
        marks["end"] = time.monotonic()
        figures = admin.figures(candidate)["roles"]
    finally:
        traffic.stop()
        for name in ("beat", "worker"):
            found[name].stop()
        for name in ("worker", "beat"):
            originals[name].start()
        admin.activate(active["version"])
        for key_id in made_ids:  # the run's keys serve nothing after it
            admin.revoke_key(key_id)
        shutil.rmtree(work, ignore_errors=True)

    from sqlalchemy import select

    from factloom.ledger import AuditEvent

    with db.session() as session:
        event = session.scalars(select(AuditEvent).where(AuditEvent.action == "model.rollback",
                                                         AuditEvent.target == broken)).first()
    db.dispose()
    # the audit row is written as the third failing period ends: its wall time, mapped onto the monotonic clock
    decided = None
    if event is not None:
        at = event.created_at if event.created_at.tzinfo else event.created_at.replace(tzinfo=timezone.utc)
        decided = marks["end"] - (time.time() - at.timestamp())
    if served_again is not None:
        marks["rollback"] = served_again
    steady = summary(traffic.window(marks["shadow"] - args.phase, marks["shadow"]), candidate)
    # the windows after each swap that should not hurt; while the broken version is active the
    # training-free baseline answers (slower by design), reported apart
    span = min(args.phase, 10.0)
    swaps = [name for name in ("shadow", "ab", "active", "rollback") if name in marks]
    windows = {name: summary(traffic.window(marks[name], marks[name] + span), candidate) for name in swaps}
    # against the same span just before each swap (the machine's load drifts over a run), and the first steady one
    before = {name: summary(traffic.window(marks[name] - span, marks[name]), candidate) for name in swaps
              if name != "rollback"}
    degraded = summary(traffic.window(marks["broken"], served_again or marks["end"]), candidate)
    metrics: dict[str, Any] = {
        "requests": len(traffic.log), "failed_requests": sum(not e[2] for e in traffic.log),
        "questions_per_s": round(len(traffic.log) / (marks["end"] - traffic.log[0][0]), 1) if traffic.log else 0.0,
        "errors": traffic.errors[:5], "steady": steady, "after_swap": windows, "while_broken": degraded,
        "before_swap": before,
        "p95_ratio": {name: round(w["latency_ms_p95"] / before.get(name, steady)["latency_ms_p95"], 3)
                      for name, w in windows.items()},
        "p95_ratio_to_steady": {name: round(w["latency_ms_p95"] / steady["latency_ms_p95"], 3)
                                for name, w in windows.items()},
        "rollback_reason": (event.details or {}).get("reason") if event is not None else None,
        "broken_to_rollback_s": round(decided - marks["broken"], 2) if decided else None,
        "third_failing_period_to_served_s": round(served_again - decided, 2) if served_again and decided else None,
        "period_s": args.period,
        "candidate_figures": figures,
    }
    metrics["goals"] = {
        "no_failed_requests": metrics["failed_requests"] == 0,
        "p95_within_1_2x": all(r <= 1.2 for r in metrics["p95_ratio"].values()),
        "rollback_within_period_plus_10s": (metrics["third_failing_period_to_served_s"] is not None
                                            and metrics["third_failing_period_to_served_s"] <= args.period + 10),
    }
    print(f"requests {metrics['requests']}, failed {metrics['failed_requests']}; steady p95 "
          f"{steady['latency_ms_p95']} ms")
    for name, w in windows.items():
        print(f"  after {name:<8} p95 {w['latency_ms_p95']:>7} ms ({metrics['p95_ratio'][name]}× the 10 s before, "
              f"{metrics['p95_ratio_to_steady'][name]}× steady), candidate answered {w['candidate_share']:.1%}")
    shadow = figures["shadow"]
    print(f"  the shadow answered {shadow['questions']} questions, agreed on {shadow['agreement']}")
    print(f"  while broken (the baseline answers) p95 {degraded['latency_ms_p95']} ms")
    print(f"rollback: {metrics['broken_to_rollback_s']} s after the break; served "
          f"{metrics['third_failing_period_to_served_s']} s after the third failing period")
    write_result(args.out, benchmark="swap", dataset="metaqa", split="dev",
                 settings={"kb": args.kb, "clients": args.clients, "phase_s": args.phase, "warm_up_s": args.warm_up,
                           "share": args.share,
                           "period_s": args.period, "seed": args.seed, "reasoner": active["version"]},
                 metrics=metrics, started=started)


if __name__ == "__main__":
    main()
