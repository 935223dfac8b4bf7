"""Query API under concurrent load on the demo KB: throughput, p50 / p95 / p99 latency, errors,
and hits@1 of the answers on the same MetaQA questions (BENCHMARKS.md §5)."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from _common import load_client, percentile, parser, write_result

from factloom.client import ApiError
from factloom.config import DEFAULT_KB, get_settings


def load_questions(data_dir, hops: list[int], n: int, seed: int) -> list[tuple[str, set[str], int]]:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    out = []
    for hop in hops:
        lines = (data_dir / "metaqa" / f"qa_{hop}hop_dev.txt").read_text(encoding="utf-8").splitlines()
        for line in rng.sample(lines, min(n, len(lines))):
            question, answers = line.split("\t")
            out.append((question, {a.casefold() for a in answers.split("|")}, hop))
    return out


def run_level(api, questions: list[tuple[str, set[str], int]], level: int, kb: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Every question once, from ``level`` concurrent clients."""
    latencies: list[float] = []
    hits: dict[int, list[int]] = {}
    errors = 0
    lock = threading.Lock()

    def one(item: tuple[str, set[str], int]) -> None:
        nonlocal errors
        question, answers, hop = item
        t0 = time.perf_counter()
        try:
            body = api.query(question, kb=kb, top_k=1)
        except (ApiError, OSError):
            with lock:
                errors += 1
            return
        elapsed = (time.perf_counter() - t0) * 1000
        top = body["answers"][0]["name"].casefold() if body["answers"] else None  # the KB's case may differ
        with lock:
            latencies.append(elapsed)
            hits.setdefault(hop, []).append(int(top in answers))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=level) as pool:
        list(pool.map(one, questions))
    wall = time.perf_counter() - t0
    return {
        "qps": round(len(latencies) / wall, 2),
        "latency_ms_p50": round(percentile(latencies, 0.5), 1),
        "latency_ms_p95": round(percentile(latencies, 0.95), 1),
        "latency_ms_p99": round(percentile(latencies, 0.99), 1),
        "errors": errors, "requests": len(questions),
        "hits_at_1": {f"{h}hop": round(sum(v) / len(v), 4) for h, v in sorted(hits.items())},
    }


def main() -> None:
    p = parser("query", __doc__ or "")
    p.add_argument("--kb", default=DEFAULT_KB)
    p.add_argument("--levels", default="1,8,32", help="concurrent clients, comma separated")
    p.add_argument("--questions", type=int, default=100, help="questions per hop")
    p.add_argument("--hops", default="1,2")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    started = time.perf_counter()
    settings = get_settings()
    questions = load_questions(args.data_dir, [int(h) for h in args.hops.split(",")], args.questions, args.seed)
    levels = [int(x) for x in args.levels.split(",")]
    metrics: dict[str, object] = {"levels": {}}
    api = load_client(settings)
    # warm the models; the answer says which serve the kb (learned where trained for it, else the baseline)
    versions = api.query(questions[0][0], kb=args.kb)["model_versions"]
    for level in levels:
        metrics["levels"][str(level)] = run_level(api, questions, level, args.kb)  # type: ignore[index]
    print(f"{'clients':>8}{'qps':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}  hits@1")
    for level, m in metrics["levels"].items():  # type: ignore[attr-defined]
        print(f"{level:>8}{m['qps']:>8}{m['latency_ms_p50']:>9}{m['latency_ms_p95']:>9}{m['latency_ms_p99']:>9}"
              f"{m['errors']:>8}  {m['hits_at_1']}")
    write_result(args.out, benchmark="query", dataset="metaqa", split="dev",
                 settings={"kb": args.kb, "levels": levels, "questions_per_hop": args.questions,
                           "hops": args.hops, "seed": args.seed, "reasoner": versions["reasoner"],
                           "router": versions["router"]},
                 metrics=metrics, started=started)


if __name__ == "__main__":
    main()
