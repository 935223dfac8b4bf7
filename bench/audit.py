"""Live certification on CoDEx (issue 34): a stream of facts, a blind audit, thresholds re-certified as labels arrive.

Starts from the pipeline of ``bench factcheck`` (same scorers, verifiers and cross-fitted fusion, tuned
on ``valid`` + ``valid_negatives``), whose out-of-fold validation scores seed one
:class:`~factloom.verify.audit.AuditLedger` per target. The reported facts (``--split``, with their
negatives, shuffled with ``--seed``) then arrive in batches of ``--stream-batch`` through the same
fusion: a fact beyond the current accept / reject threshold is decided automatically, and an
:class:`~factloom.verify.audit.AuditSampler` sends ``--audit-share`` of those (stratified by fused
probability) to a blind audit; a fact between the thresholds goes to review. Simulated reviewers
answer both from the gold labels; audit labels (weight 1 / inclusion probability) and review labels
(weight 1) enter the ledger after the batch was decided, and the ledger re-certifies before the next
batch. With ``--split valid`` (CoDEx-M, whose test split is held back) the facts are cut into
``--folds`` folds by object entity as in ``bench factcheck``; fold k's facts are scored, decided and
audited by a pipeline and a ledger built from the other folds only, and the folds' facts are
interleaved in one shuffled stream. No streamed fact's label is used before its fact was decided.

Per target (0.05, 0.01, 0.0007, run together): the realised error among auto-accepted facts over the
stream and in its worst window of 2,000 facts, the certified bound, automation, audit labels spent,
the audit share, and where nothing is certified at the end, the labels it would take (extrapolated).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import REPO, write_result
from factcheck import TARGETS, Triple, apply_dataset_defaults, build_parser, load_setup, object_folds

from factloom.verify.audit import AuditLedger, AuditSampler, labels_to_certify, look_alpha

WINDOW = 2000  # facts per window of BENCHMARKS.md's max_window_error


@dataclass
class Segment:
    """Facts scored by one tuned pipeline, with the validation evidence that tuned it."""

    index: np.ndarray  # positions of its facts in the reported facts
    ids: list[str]
    raw: np.ndarray  # fusion log-odds
    prob: np.ndarray  # calibrated fused probability
    val_raw: np.ndarray  # out-of-fold validation log-odds and labels (the fusion's certificate basis)
    val_y: np.ndarray
    val_prob: np.ndarray


STREAM_ONLY = ("out", "target", "audit_share", "stream_batch", "seed", "threads", "cache", "data_dir")


def segments(args: Any) -> tuple[list[Segment], np.ndarray, str]:
    """Scored segments, from ``--cache`` when the same pipeline settings scored them before."""
    key = {k: v for k, v in vars(args).items() if k not in STREAM_ONLY}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    path = args.cache / f"audit-{args.dataset}-{args.split}-{digest}.npz"
    if path.exists():
        data = np.load(path, allow_pickle=False)
        meta = json.loads(str(data["meta"]))
        segs = [Segment(**{f: (meta["ids"][j] if f == "ids" else data[f"{j}-{f}"]) for f in Segment.__annotations__})
                for j in range(meta["segments"])]
        print(f"scored stream: cached ({path.name})")
        return segs, data["y"], meta["version"]
    segs, y, version = score_segments(args)
    arrays = {f"{j}-{f}": v for j, seg in enumerate(segs) for f, v in asdict(seg).items() if f != "ids"}
    meta = {"segments": len(segs), "version": version, "ids": [seg.ids for seg in segs]}
    args.cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, y=y, meta=json.dumps(meta), **arrays)
    return segs, y, version


def score_segments(args: Any) -> tuple[list[Segment], np.ndarray, str]:
    """Tune the pipeline(s) and score the reported facts: one segment (test) or one per fold (valid)."""
    _, (tune_facts, tune_y), (facts, y), pipe = load_setup(args)
    parts: list[tuple[list[Triple], np.ndarray, np.ndarray]] = []
    if args.split == "test":
        parts.append((tune_facts, tune_y, np.arange(len(facts))))
    else:
        fold = object_folds(facts, args.folds)
        for k in range(args.folds):
            tr = np.flatnonzero(fold != k)
            parts.append(([facts[i] for i in tr], y[tr], np.flatnonzero(fold == k)))
    out = []
    for k, (tf, ty, idx) in enumerate(parts):
        pipe.tune(tf, ty, seed=k)
        fusion = pipe.fusion
        assert fusion is not None and fusion.held_out is not None and fusion.calibrator is not None
        raw, prob = fusion.scores(pipe.results([facts[i] for i in idx]))
        val_raw, val_y = fusion.held_out
        out.append(Segment(idx, ["|".join(facts[i]) for i in idx], raw, prob, val_raw, val_y,
                           np.asarray(fusion.calibrator.predict(val_raw.tolist()))))
    return out, y, str(pipe.fusion.version if pipe.fusion else "")


def decide(ledger: AuditLedger, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    acc = raw >= ledger.accept_threshold if ledger.accept_threshold is not None else np.zeros(len(raw), bool)
    rej = (raw <= ledger.reject_threshold) & ~acc if ledger.reject_threshold is not None else np.zeros(len(raw), bool)
    return acc, rej


def simulate(segs: list[Segment], y: np.ndarray, order: np.ndarray, *, target: float, share: float,
             batch: int, seed: int) -> dict[str, Any]:
    """Stream ``order`` through the segments' ledgers at one target; per-fact outcomes and per-batch records."""
    ledgers = [AuditLedger.start(s.val_raw, s.val_y, target=target) for s in segs]
    start_certified = [lg.accept_threshold is not None for lg in ledgers]
    where = np.zeros(len(y), dtype=np.int64)
    pos = np.zeros(len(y), dtype=np.int64)
    for j, s in enumerate(segs):
        where[s.index], pos[s.index] = j, np.arange(len(s.index))
    n = len(order)
    acc, rej, audited = (np.zeros(n, dtype=bool) for _ in range(3))
    records = []
    for b0 in range(0, n, batch):
        sl = np.arange(b0, min(n, b0 + batch))
        for j, (seg, ledger) in enumerate(zip(segs, ledgers, strict=True)):
            mine = sl[where[order[sl]] == j]
            if not len(mine):
                ledger.update()
                continue
            p = pos[order[mine]]
            a, r = decide(ledger, seg.raw[p])
            va, vr = decide(ledger, seg.val_raw)
            sampler = AuditSampler.allocate(seg.val_prob[va | vr], share=share, seed=seed + j)
            pi = sampler.inclusion(seg.prob[p])
            au = (a | r) & sampler.select([seg.ids[i] for i in p], seg.prob[p])
            acc[mine], rej[mine], audited[mine] = a, r, au
            lab = au | ~(a | r)  # audited, or decided by a reviewer
            ledger.add(seg.raw[p][lab], y[order[mine]][lab], np.where(au, 1.0 / pi, 1.0)[lab], seen=seg.raw[p])
            ledger.update()
        done = slice(0, sl[-1] + 1)
        wrong = y[order[done]] == 0
        bounds = [lg.accept.bound for lg in ledgers if lg.accept is not None and lg.accept.bound is not None]
        records.append({
            "facts": int(sl[-1] + 1), "automation_batch": float((acc[sl] | rej[sl]).mean()),
            "accept_share_batch": float(acc[sl].mean()),
            "error_batch": float(wrong[sl][acc[sl]].mean()) if acc[sl].any() else None,
            "realised_error": float(wrong[acc[done]].mean()) if acc[done].any() else None,
            "bound": max(bounds) if bounds else None, "labels": int(audited[done].sum()),
            "review_labels": int((~(acc | rej))[done].sum()),
            "certified_segments": sum(lg.accept_threshold is not None for lg in ledgers),
            "looks": [lg.look for lg in ledgers], "drifts": sum(lg.drifts for lg in ledgers),
        })
    return {"ledgers": ledgers, "acc": acc, "rej": rej, "audited": audited, "records": records,
            "start_certified": start_certified}


def windows(acc: np.ndarray, wrong: np.ndarray, size: int = WINDOW) -> list[dict[str, Any]]:
    """Consecutive, non-overlapping windows of ``size`` stream facts (a shorter tail joins the last one)."""
    n = len(acc)
    cuts = list(range(0, n, size))
    if len(cuts) > 1 and n - cuts[-1] < size // 2:
        cuts.pop()
    out = []
    for i, c in enumerate(cuts):
        end = cuts[i + 1] if i + 1 < len(cuts) else n
        a, w = acc[c:end], wrong[c:end]
        out.append({"start": c, "end": end, "accepted": int(a.sum()), "errors": int((a & w).sum()),
                    "error": float((a & w).sum() / a.sum()) if a.any() else 0.0, "automation": None})
    return out


def sliding_max(acc: np.ndarray, wrong: np.ndarray, size: int = WINDOW) -> float:
    """The worst error among accepted facts over every window of ``size`` consecutive facts."""
    if len(acc) <= size:
        return float((acc & wrong).sum() / acc.sum()) if acc.any() else 0.0
    ca, ce = np.concatenate([[0], np.cumsum(acc)]), np.concatenate([[0], np.cumsum(acc & wrong)])
    na, ne = ca[size:] - ca[:-size], ce[size:] - ce[:-size]
    return float((ne[na > 0] / na[na > 0]).max()) if (na > 0).any() else 0.0


def still_needed(segs: list[Segment], ledgers: list[AuditLedger], share: float) -> dict[str, Any]:
    """Where a ledger certifies nothing at the end: the labels (and stream facts) it would take.

    Extrapolated per candidate block at its current weighted error rate and the next look's budget;
    the block needing the fewest stream facts is reported. While nothing is certified every fact of
    the block goes to review and is labelled (``stream_facts_to_certify``); audited at ``share``
    alone it would take ``stream_facts_audit_only``. ``None`` when every block's error rate is at or
    above the target: no number of labels would do (``strictest_block_error`` says how far off;
    ``labels_if_error_free`` what a spotless block would need).
    Segments (folds) add their labels; each gets ``1 / len(segs)`` of the stream.
    """
    per = []
    for seg, lg in zip(segs, ledgers, strict=True):
        if lg.accept_threshold is not None:
            continue
        best: dict[str, Any] | None = None
        lowest = 1.0
        for t in lg.accept_grid:
            blk = lg.block("accept", t)
            lowest = min(lowest, blk["error_rate"]) if blk["labels"] else lowest
            missing = labels_to_certify(blk["error_rate"], blk["effective"], target=lg.target,
                                        alpha=look_alpha(lg.alpha, lg.look + 1))
            inside = float((seg.raw >= t).mean())
            if missing is None or not inside:
                continue
            if best is None or missing / inside < best["stream_facts"]:
                best = {"threshold": t, "accept_share": inside, "error_rate": blk["error_rate"],
                        "effective_labels": blk["effective"], "missing_labels": missing,
                        "stream_facts": missing / inside, "stream_facts_audit_only": missing / (inside * share)}
        first = lg.block("accept", lg.accept_grid[0]) if lg.accept_grid else {"error_rate": None, "labels": 0}
        per.append({"best": best, "strictest_block_error": first["error_rate"],
                    "strictest_block_labels": first["labels"], "lowest_block_error": lowest})
    if not per:
        return {}
    lg = ledgers[0]
    out: dict[str, Any] = {"labels_to_certify": None, "stream_facts_to_certify": None,
                           "stream_facts_audit_only": None, "per_segment": per,
                           # what an error-free block would need, per segment, at the next look's budget
                           "labels_if_error_free": labels_to_certify(0.0, 0.0, target=lg.target,
                                                                     alpha=look_alpha(lg.alpha, lg.look + 1))}
    if all(p["best"] is not None for p in per):
        out["labels_to_certify"] = float(sum(p["best"]["missing_labels"] for p in per))
        out["stream_facts_to_certify"] = float(max(p["best"]["stream_facts"] for p in per)) * len(segs)
        out["stream_facts_audit_only"] = float(max(p["best"]["stream_facts_audit_only"] for p in per)) * len(segs)
    return out


def summarise(sim: dict[str, Any], segs: list[Segment], y_stream: np.ndarray, share: float) -> dict[str, Any]:
    acc, rej, audited = sim["acc"], sim["rej"], sim["audited"]
    wrong = y_stream == 0
    decided = acc | rej
    wins = windows(acc, wrong)
    last = slice(max(0, len(acc) - WINDOW), len(acc))
    recs = sim["records"]
    below = [r["facts"] for r in recs if r["bound"] is not None and r["realised_error"] is not None
             and r["bound"] < r["realised_error"]]
    first = next((r["facts"] for r in recs if r["certified_segments"]), None)
    ledgers: list[AuditLedger] = sim["ledgers"]
    out = {
        "realised_error": float(wrong[acc].mean()) if acc.any() else 0.0,
        "max_window_error": max(w["error"] for w in wins),
        "max_sliding_window_error": sliding_max(acc, wrong),
        "bound": recs[-1]["bound"], "automation": float(decided.mean()),
        "automation_end": float(decided[last].mean()), "accept_share": float(acc.mean()),
        "labels": int(audited.sum()), "audit_share": float(audited.sum() / decided.sum()) if decided.any() else 0.0,
        "review_labels": int((~decided).sum()), "accepted": int(acc.sum()), "rejected": int(rej.sum()),
        "reject_error": float((~wrong[rej]).mean()) if rej.any() else 0.0,
        "validation_certified": all(sim["start_certified"]),
        "validation_certified_segments": int(sum(sim["start_certified"])),
        "certified_end_segments": sum(lg.accept_threshold is not None for lg in ledgers),
        "first_certified_at_fact": first, "bound_below_realised_at": below,
        "looks": [lg.look for lg in ledgers], "drifts": sum(lg.drifts for lg in ledgers),
        "windows": wins, "batches": recs,
        "certificates": [lg.accept.reason if lg.accept else None for lg in ledgers],
    }
    out.update(still_needed(segs, ledgers, share))
    return out


def plot(results: dict[str, dict[str, Any]], stem: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(7, 9), sharex=True)
    for (target, r), colour in zip(results.items(), ("C0", "C1", "C2"), strict=False):
        recs = r["batches"]
        x = [q["facts"] for q in recs]
        axes[0].plot(x, [np.nan if q["realised_error"] is None else q["realised_error"] for q in recs], colour,
                     label=f"{target}: realised")
        axes[0].plot(x, [np.nan if q["bound"] is None else q["bound"] for q in recs], colour, ls="--",
                     label=f"{target}: certified bound")
        axes[0].axhline(float(target), color=colour, lw=0.6, ls=":")
        axes[1].plot(x, [q["automation_batch"] for q in recs], colour, label=f"target {target}")
        axes[2].plot(x, [q["labels"] for q in recs], colour, label=f"target {target}")
    axes[0].set(ylabel="error among auto-accepted", title=f"Live certification — {title}")
    axes[0].set_yscale("symlog", linthresh=1e-3)
    axes[0].set_ylim(0, 0.1)
    axes[1].set(ylabel="automation (per batch)")
    axes[2].set(ylabel="audit labels spent", xlabel="facts streamed")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{stem}.png", dpi=120)
    plt.close(fig)
    print(f"wrote {stem}.png")


def main() -> None:
    p = build_parser("factloom bench audit", __doc__)
    p.add_argument("--target", type=float, default=0.01, help="the headline target (all of 0.05, 0.01, 0.0007 run)")
    p.add_argument("--audit-share", type=float, default=0.02, help="share of automatic verdicts audited")
    p.add_argument("--stream-batch", type=int, default=500, help="facts per batch of the stream")
    p.add_argument("--seed", type=int, default=0, help="the stream's order and the audit hash")
    args = apply_dataset_defaults(p.parse_args())
    started = time.perf_counter()
    out = args.out or REPO / "bench" / "results" / f"audit-{args.dataset}.json"
    segs, y, version = segments(args)
    order = np.random.default_rng(args.seed).permutation(len(y))
    targets = sorted({*TARGETS, f"{args.target:g}"}, key=lambda t: -float(t))
    results = {}
    for target in targets:
        sim = simulate(segs, y, order, target=float(target), share=args.audit_share, batch=args.stream_batch,
                       seed=args.seed)
        results[target] = summarise(sim, segs, y[order], args.audit_share)
        r = results[target]
        print(f"target {target}: realised {r['realised_error']:.4f} (worst window {r['max_window_error']:.4f}), "
              f"bound {r['bound']}, automation {r['automation']:.3f} (end {r['automation_end']:.3f}), "
              f"audit labels {r['labels']} ({r['audit_share']:.3f} of automatic), "
              f"validation certified {r['validation_certified_segments']}/{len(segs)}, "
              f"end {r['certified_end_segments']}/{len(segs)}"
              + (f", labels to certify {r['labels_to_certify']}" if "labels_to_certify" in r else ""))
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    settings["stream_facts"], settings["segments"] = len(y), len(segs)
    write_result(out, benchmark="audit", dataset=args.dataset, split=args.split, settings=settings,
                 metrics={"targets": results, "facts": int(len(y)), "fusion_version": version, "window": WINDOW},
                 started=started)
    plot(results, out.with_suffix(""), f"{args.dataset} {args.split}")


if __name__ == "__main__":
    main()
