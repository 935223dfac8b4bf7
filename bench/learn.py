"""Continual learning through the running platform (BENCHMARKS.md §4, "through the platform").

A kb is loaded with LKGE snapshot 0 through ``POST /v1/facts`` and gets its first scorer from the
learner; then snapshot 1 is pushed the same way, and the bench waits, touching nothing, until the
learner's beat-planned updates have an active scorer that has learned every committed fact
(``GET /v1/models/learn`` answers 0), or the update that covered them failed its gates. Reported:
the time from the end of that load (the last fact committed) to that point, every version the
learner registered on the way with its gates, and how many new entities it knows. The platform's
own settings apply (``learn_min_facts``, ``learn_period_s``): nothing is tuned here.

    factloom bench learn --data-dir ../shared/data/lkge --set ENTITY --out bench/results/learn-platform.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from _common import DEFAULT_DATA, REPO, client, read_triples, write_result

from factloom.platform.bulk import ingest_facts


def facts(path: Path, source: str) -> list[dict[str, Any]]:
    return [{"subject": s, "predicate": p, "object": o, "source": source} for s, p, o in read_triples(path)]


def scorers(api: Any, kb: str) -> list[dict[str, Any]]:
    return api.models(kind="scorer", kb=kb, limit=500)  # type: ignore[no-any-return]


def wait_learned(api: Any, kb: str, timeout: float) -> float:
    """Seconds until the learner has judged every committed fact: the kb's active scorer learned them
    all, or its latest update, which covered them, failed its gates (the parent serves on)."""
    start = time.monotonic()
    while True:
        new = api.unlearned(kb, "scorer")
        versions = scorers(api, kb)
        active = [v for v in versions if v["status"] == "active"]
        finished = [v for v in versions if "passed" in (v["gates"] or {})]
        if active and (new == 0 or (finished and finished[0]["metrics"].get("new_facts") == new)):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise SystemExit(f"kb {kb!r}: {new} committed facts still unlearned after {timeout:.0f} s; "
                             "see the learner's log")
        time.sleep(2.0)


def main() -> None:
    p = argparse.ArgumentParser(prog="factloom bench learn", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA / "lkge", help="../shared/data/lkge")
    p.add_argument("--set", default="ENTITY", help="an LKGE set: ENTITY, FACT, …")
    p.add_argument("--kb", help="a kb that holds nothing yet (default: lkge-SET)")
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "learn-platform.json")
    args = p.parse_args()
    kb = args.kb or f"lkge-{args.set.lower()}"
    paths = [args.data_dir / args.set / str(i) / "train.txt" for i in (0, 1)]
    missing = [str(x) for x in paths if not x.is_file()]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: --data-dir must be laid out as ../shared/data/lkge")
    started = time.perf_counter()
    api = client()
    if scorers(api, kb):
        raise SystemExit(f"kb {kb!r} has scorers already: pass a fresh --kb")

    loads: dict[str, Any] = {}
    for snapshot, path in enumerate(paths):
        rows = facts(path, source=f"lkge-{args.set.lower()}-{snapshot}")
        t0 = time.monotonic()
        result = ingest_facts(api, rows, kb=kb, timeout=args.timeout)
        load_s = time.monotonic() - t0
        if snapshot == 0 and not [v for v in scorers(api, kb) if v["status"] == "active"]:
            api.learn(kb, "scorer")  # its first, now
        learned_s = wait_learned(api, kb, args.timeout)
        loads[str(snapshot)] = {"facts": len(rows), "verdicts": result.counts, "load_seconds": round(load_s, 1),
                                "seconds_from_last_commit_to_active": round(learned_s, 1)}
        print(f"snapshot {snapshot}: {len(rows)} facts loaded in {load_s:.0f} s ({result.counts}); the learner "
              f"had judged an update on them all {learned_s:.0f} s after the last commit")

    versions = sorted(scorers(api, kb), key=lambda v: v["created_at"])
    final = next(v for v in versions if v["status"] == "active")
    updates = [{"version": v["version"], "status": v["status"], "parent": v["parent"], "gates": v["gates"],
                "new_facts": v["metrics"].get("new_facts"), "new_entities": v["metrics"].get("new_entities"),
                "train_seconds": v["metrics"].get("train_seconds")} for v in versions]
    for u in updates:
        gates = u["gates"] or {}
        shown = ", ".join(f"{k} {g['value']:.3f} (parent {g['parent']:.3f})" for k, g in gates.items()
                          if isinstance(g, dict))
        print(f"  {u['version']}: {u['status']}, {u['new_facts']} new facts, {u['new_entities']} new entities"
              f"{', gates ' + ('passed' if gates.get('passed') else 'failed') + ': ' + shown if shown else ''}")
    metrics = {"kb": kb, "loads": loads, "versions": updates, "active": final["version"],
               "seconds_from_last_commit_to_active": loads["1"]["seconds_from_last_commit_to_active"],
               "new_entities_learned": sum(u["new_entities"] or 0 for u in updates if u["parent"]),
               "updates_passed": sum(1 for u in updates if (u["gates"] or {}).get("passed")),
               "updates_failed": sum(1 for u in updates if u["gates"] and not u["gates"].get("passed"))}
    write_result(args.out, benchmark="learn-platform", dataset=f"lkge/{args.set}", split="train 0→1",
                 settings={"set": args.set, "kb": kb}, metrics=metrics, started=started)


if __name__ == "__main__":
    main()
