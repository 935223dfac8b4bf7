"""Ingest throughput: facts/s from ``POST /v1/facts`` to committed in Neo4j, check stage on,
against Neo4j's raw batched write rate measured in the same run (BENCHMARKS.md §5).

``--evidence-text`` adds a second arm: as many other facts, each with an evidence text that the text
verifier embeds, so the check stage is measured with and without text evidence in the same run.
``--repeat N`` runs N times on fresh KB lines (the worker's sentence-model cache never sees a text
twice) and reports the medians, with every run's figures under ``runs``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from _common import client, parser, write_result

from factloom.config import get_settings
from factloom.graph import FactWrite, Neo4jStore, fact_id_for
from factloom.platform.bulk import ingest_facts


def main() -> None:
    p = parser("ingest", __doc__ or "")
    p.add_argument("--facts", type=int, default=20000, help="how many MetaQA KB lines to ingest")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--skip", type=int, default=0, help="start this many KB lines in")
    p.add_argument("--evidence-text", action="store_true",
                   help="also send as many other facts, each with an evidence text the text verifier embeds, "
                        "and report both rates (the check stage with and without text evidence)")
    p.add_argument("--repeat", type=int, default=1, help="runs, each on fresh KB lines; medians are reported")
    args = p.parse_args()
    started = time.perf_counter()
    settings = get_settings()
    every = (args.data_dir / "metaqa" / "kb.txt").read_text(encoding="utf-8").splitlines()
    per_run = args.facts * (2 if args.evidence_text else 1)
    runs = []
    for i in range(args.repeat):
        lines = every[args.skip + i * per_run: args.skip + (i + 1) * per_run]
        runs.append(_run(settings, lines, facts=args.facts, batch_size=args.batch_size,
                         evidence_text=args.evidence_text))
    numeric = [k for k, v in runs[0].items() if isinstance(v, int | float)]
    metrics: dict[str, Any] = {k: round(statistics.median(r[k] for r in runs), 3) for k in numeric}
    metrics.update({k: v for k, v in runs[-1].items() if k not in numeric})
    if args.repeat > 1:
        metrics["runs"] = runs
    print(f"{'path (median)':<28}{'facts/s':>10}{'seconds':>10}")
    print(f"{'POST → checked → Neo4j':<28}{metrics['facts_per_s']:>10}{metrics['api_seconds']:>10}")
    if args.evidence_text:
        print(f"{'  … with evidence text':<28}{metrics['evidence_text_facts_per_s']:>10}"
              f"{metrics['evidence_text_seconds']:>10}")
    print(f"{'raw batched Neo4j writes':<28}{metrics['raw_neo4j_facts_per_s']:>10}{metrics['raw_seconds']:>10}")
    write_result(args.out, benchmark="ingest", dataset="metaqa-kb", split="kb",
                 settings={"facts": args.facts, "batch_size": args.batch_size, "evidence_text": args.evidence_text,
                           "skip": args.skip, "repeat": args.repeat, "check_chunk_size": settings.check_chunk_size},
                 metrics=metrics, started=started)


def _run(settings: Any, lines: list[str], *, facts: int, batch_size: int, evidence_text: bool) -> dict[str, Any]:
    rows = _rows(lines[:facts])
    # the evidence arm sends the next facts of the KB (the same ones would be duplicates of facts
    # already in the graph) with a two-sentence evidence text each
    text_rows = _rows(lines[facts: 2 * facts]) if evidence_text else []
    for row in text_rows:
        row["evidence"] = {"text": f"This line comes from the benchmark. {row['subject']} "
                                   f"{row['predicate'].replace('_', ' ')} {row['object']}."}
    # fresh knowledge bases each run: the ledger remembers every submission, so facts sent to an
    # earlier run's kb would come back as duplicates and never reach the check stage
    run = time.strftime("%Y%m%d%H%M%S")
    api_kb, raw_kb, text_kb = f"bench-ingest-{run}", f"bench-raw-{run}", f"bench-text-{run}"
    store = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
    with client(settings) as api:
        t0 = time.perf_counter()
        result = ingest_facts(api, rows, kb=api_kb, batch_size=batch_size, total=len(rows), timeout=7200)
        api_seconds = time.perf_counter() - t0
        if text_rows:
            t0 = time.perf_counter()
            text_result = ingest_facts(api, text_rows, kb=text_kb, batch_size=batch_size, total=len(text_rows),
                                       timeout=7200)
            text_seconds = time.perf_counter() - t0
    entities, graph_facts = store.count(api_kb)

    # the raw rate: the same facts written straight through the store in the same batch size,
    # without the API, the ledger, the checks or the entity embeddings
    t0 = time.perf_counter()
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        store.write_facts(raw_kb, [
            FactWrite(fact_id=fact_id_for(raw_kb, r["subject"], r["predicate"], r["object"]), subject=r["subject"],
                      predicate=r["predicate"], object=r["object"], source="bench")
            for r in chunk
        ])
    raw_seconds = time.perf_counter() - t0
    for kb in (api_kb, raw_kb, text_kb):
        store.drop_kb(kb)
    store.close()
    if result.submitted < 0.9 * len(rows):
        raise SystemExit(f"only {result.submitted} of {len(rows)} facts were new submissions; rates would mislead")

    metrics: dict[str, Any] = {
        # per new submission: lines that normalise to an already-sent fact are duplicates, not work
        "facts_per_s": round(result.submitted / api_seconds, 1),
        "raw_neo4j_facts_per_s": round(len(rows) / raw_seconds, 1),
        "ratio_to_raw": round(raw_seconds / api_seconds, 3),
        "api_seconds": round(api_seconds, 2), "raw_seconds": round(raw_seconds, 2),
        "submitted": result.submitted, "duplicates": result.duplicates, "verdicts": result.counts,
        "graph_entities": entities, "graph_facts": graph_facts, "errors": 0,
    }
    if text_rows:
        text_rate = text_result.submitted / text_seconds
        metrics.update({
            "evidence_text_facts_per_s": round(text_rate, 1), "evidence_text_seconds": round(text_seconds, 2),
            "evidence_text_submitted": text_result.submitted, "evidence_text_verdicts": text_result.counts,
            "evidence_text_ratio_to_plain": round(text_rate / metrics["facts_per_s"], 3),
        })
    return metrics


def _rows(lines: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [dict(zip(("subject", "predicate", "object"), line.split("|"), strict=True))
                                  for line in lines]
    for row in rows:
        row["source"] = "bench"
    return rows


if __name__ == "__main__":
    main()
