"""Fact checking on CoDEx triple classification (BENCHMARKS.md §1): graph verifiers + learned fusion.

Trains the ComplEx plausibility scorer(s) on ``train`` (cached on disk by their settings), runs the
real verifiers (:class:`PlausibilityVerifier` per scorer, :class:`TypeVerifier` from ``entity2types``
and the training facts) over the labelled facts, and fits the :class:`LearnedFusion` on
``valid`` + ``valid_negatives``: one stratified part fits the classifier and the scorers' per-relation
Platt calibration, the other part calibrates the fused probability and certifies the thresholds.
Reports on ``--split``: with ``test`` the tuned pipeline scores test + test_negatives; with ``valid``
(CoDEx-M, whose test split is held back) the valid facts are cut into ``--folds`` folds and each fold
is scored by a pipeline tuned on the other folds only, so no reported fact's label was used to fit,
calibrate or certify what scores it (folds group facts by object entity). Test labels are read only to report.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import DEFAULT_DATA, REPO, read_triples, write_result

from factloom.model.scorer import ComplExScorer
from factloom.verify.base import Claim, VerifierResult
from factloom.model.calibrate import expected_calibration_error
from factloom.verify.domains import TypeConstraints, TypeVerifier
from factloom.verify.fuse_model import LearnedFusion
from factloom.verify.plausibility import PlausibilityVerifier

Triple = tuple[str, str, str]
TARGETS = ("0.05", "0.01", "0.0007")
NOW = __import__("datetime").datetime(2026, 1, 1, tzinfo=__import__("datetime").timezone.utc)


def train_scorers(args: argparse.Namespace, train: list[Triple], vocab: list[Triple]) -> list[ComplExScorer]:
    """One scorer per seed in ``--seeds``; cached under ``--cache`` keyed by data and settings."""
    scorers = []
    digest = hashlib.sha256("\n".join("\t".join(t) for t in train).encode()).hexdigest()[:12]
    ranks = args.ranks or [args.rank] * len(args.seeds)
    if len(ranks) != len(args.seeds):
        raise SystemExit(f"--ranks needs one rank per seed ({len(args.seeds)})")
    for seed, rank in zip(args.seeds, ranks, strict=True):
        key = (f"{args.dataset}-{digest}-r{rank}-e{args.epochs}-lr{args.lr}-reg{args.reg}-b{args.batch}"
               f"{f'-n{args.negatives}' if args.negatives else ''}-s{seed}")
        path = args.cache / f"{key}.pt"
        if path.exists():
            scorers.append(ComplExScorer.load(path))
            print(f"scorer {key}: cached")
            continue
        t0 = time.perf_counter()
        scorer = ComplExScorer.from_triples(vocab, rank=rank)  # names only; fitted on train alone
        scorer.fit(train, epochs=args.epochs, lr=args.lr, reg=args.reg, batch_size=args.batch, seed=seed,
                   negatives=args.negatives)
        args.cache.mkdir(parents=True, exist_ok=True)
        scorer.save(path)
        print(f"scorer {key}: trained in {time.perf_counter() - t0:.0f} s")
        scorers.append(scorer)
    return scorers


class Pipeline:
    """The verifiers and the fusion, tuned on labelled facts, applied to new ones."""

    def __init__(self, scorers: list[ComplExScorer], types: TypeVerifier, args: argparse.Namespace) -> None:
        self.scorers, self.types, self.args = scorers, types, args
        self.names = [f"plausibility_{i}" for i in range(len(scorers))]
        self.verifiers = [PlausibilityVerifier(sc, name=n, entity_types=types.entity_types)
                          for sc, n in zip(scorers, self.names, strict=True)]
        self.fusion: LearnedFusion | None = None

    def results(self, facts: list[Triple]) -> list[list[VerifierResult]]:
        rows: list[list[VerifierResult]] = [[] for _ in facts]
        for start in range(0, len(facts), self.args.chunk):  # the check worker's batch size
            chunk = facts[start:start + self.args.chunk]
            claims = [Claim("bench", f"f{start + i}", s, p, o) for i, (s, p, o) in enumerate(chunk)]
            for verifier in [*self.verifiers, self.types]:
                for i, r in enumerate(verifier.check(claims, {}, NOW)):
                    rows[start + i].append(r)
        return rows

    def tune(self, facts: list[Triple], labels: np.ndarray, seed: int) -> None:
        details = {v.name: v.feature_names for v in self.verifiers} if self.args.features == "all" else {}
        self.fusion = LearnedFusion([*self.names, "types"], details=details, method=self.args.method,
                                    target=0.0007, seed=seed, folds=self.args.fusion_folds, start=self.args.start,
                                    deploy=self.args.deploy)
        calib = np.zeros(len(labels), dtype=bool)
        if not self.args.fusion_folds:  # a held-out part calibrates and certifies
            rng = np.random.default_rng(seed)
            for cls in (0, 1):
                idx = np.flatnonzero(labels == cls)
                calib[rng.choice(idx, size=int(round(self.args.calib_share * len(idx))), replace=False)] = True
        for sc in self.scorers:  # per-relation Platt (if asked) on the fit part only: it is a fusion input
            sc.calibrators, sc.global_calibrator = {}, None
            if self.args.scorer_calibration == "platt":
                sc.calibrate([facts[i] for i in np.flatnonzero(~calib)], labels[~calib].tolist())
        rows = self.results(facts)
        if self.args.fusion_folds:
            groups = [o for _, _, o in facts] if self.args.group_by == "object" else None
            self.fusion.fit(rows, labels, groups=groups)
            return
        fit_rows = [rows[i] for i in np.flatnonzero(~calib)]
        cal_rows = [rows[i] for i in np.flatnonzero(calib)]
        self.fusion.fit(fit_rows, labels[~calib], calib_rows=cal_rows, calib_labels=labels[calib])

    def baseline(self, facts: list[Triple], tune: list[Triple], labels: np.ndarray) -> np.ndarray:
        """Plain ComplEx (first scorer) with per-relation Platt calibration on the tuning facts, at 0.5."""
        sc = self.scorers[0]
        sc.calibrators, sc.global_calibrator = {}, None
        sc.calibrate(tune, labels.tolist())
        out = np.array([0.0 if p is None else p for p in sc.score(facts)])
        sc.calibrators, sc.global_calibrator = {}, None
        return out


def operating(fusion: LearnedFusion, raw: np.ndarray, y: np.ndarray) -> dict[str, dict[str, Any]]:
    """Per target: thresholds certified on the fusion's held-out scores, applied to the reported facts."""
    assert fusion.held_out is not None
    out = {}
    for target in TARGETS:
        fusion.choose_thresholds(*fusion.held_out, target=float(target))
        acc = raw >= fusion.accept_raw if fusion.accept_raw is not None else np.zeros(len(raw), dtype=bool)
        rej = (raw <= fusion.reject_raw) & ~acc if fusion.reject_raw is not None else np.zeros(len(raw), dtype=bool)
        cert = fusion.certificate
        assert cert is not None
        out[target] = {
            "certified": cert.certified, "threshold": fusion.accept, "reject_threshold": fusion.reject,
            "automation": float((acc | rej).mean()), "accept_share": float(acc.mean()),
            "error": float((y[acc] == 0).mean()) if acc.any() else 0.0,
            "reject_error": float((y[rej] == 1).mean()) if rej.any() else 0.0,
            "accepted": int(acc.sum()), "rejected": int(rej.sum()),
            "validation_accepted": cert.accepted, "validation_errors": cert.errors, "upper_bound": cert.upper_bound,
            "reason": cert.reason, "point_estimate": point_estimate(*fusion.held_out, raw, y, float(target)),
        }
    return out


def point_estimate(s: np.ndarray, ys: np.ndarray, raw: np.ndarray, y: np.ndarray, target: float) -> dict[str, Any]:
    """For comparison only: thresholds whose validation error is within the target (no confidence bound)."""
    order = np.argsort(-s, kind="stable")
    err = np.cumsum(ys[order] == 0) / np.arange(1, len(s) + 1)
    ok = np.flatnonzero(err <= target)
    t_acc = float(s[order][ok[-1]]) if len(ok) else np.inf
    order = np.argsort(s, kind="stable")
    err = np.cumsum(ys[order] == 1) / np.arange(1, len(s) + 1)
    ok = np.flatnonzero(err <= target)
    t_rej = float(s[order][ok[-1]]) if len(ok) else -np.inf
    acc, rej = raw >= t_acc, (raw <= min(t_rej, t_acc)) & (raw < t_acc)
    return {"automation": float((acc | rej).mean()), "accept_share": float(acc.mean()),
            "error": float((y[acc] == 0).mean()) if acc.any() else 0.0,
            "reject_error": float((y[rej] == 1).mean()) if rej.any() else 0.0}


def f1(pred: np.ndarray, y: np.ndarray) -> float:
    tp = float((pred & (y == 1)).sum())
    return 2 * tp / max(1.0, float(pred.sum() + (y == 1).sum()))


def plot(p: np.ndarray, y: np.ndarray, points: dict[str, dict[str, Any]], stem: Path, title: str,
         order_by: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    bins = np.linspace(0, 1, 11)
    idx = np.clip(np.digitize(p, bins) - 1, 0, 9)
    xs = [p[idx == b].mean() for b in range(10) if (idx == b).any()]
    ys = [y[idx == b].mean() for b in range(10) if (idx == b).any()]
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect")
    ax.plot(xs, ys, "o-", label=f"fusion (ECE {expected_calibration_error(p.tolist(), y.tolist()):.3f})")
    ax.set(xlabel="fused probability", ylabel="share true", title=f"Reliability — {title}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{stem}-reliability.png", dpi=120)
    plt.close(fig)
    order = np.argsort(-order_by, kind="stable")  # the fusion's log-odds: no ties, unlike isotonic probabilities
    wrong = np.cumsum(y[order] == 0)
    n = np.arange(1, len(p) + 1)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(n / len(p), wrong / n, label="error among auto-accepted (sweep)")
    for target, pt in points.items():
        if pt["accepted"]:
            ax.scatter([pt["accept_share"]], [pt["error"]], zorder=3,
                       label=f"target {target}: {'certified' if pt['certified'] else 'not certified'}")
    ax.set(xlabel="share auto-accepted", ylabel="error among accepted", yscale="symlog", title=title)
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{stem}-error-automation.png", dpi=120)
    plt.close(fig)
    print(f"wrote {stem}-reliability.png, {stem}-error-automation.png")


# the settings each dataset's recorded figures were measured with (bench/results/factcheck-*.json);
# explicit flags override them. CoDEx-M's 17k entities need sampled negatives and a smaller rank to
# train in minutes on two cores; CoDEx-S profits from a third ensemble member.
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "codex-s": {"rank": 128, "epochs": 30, "negatives": None, "seeds": [0, 1, 2]},
    "codex-m": {"rank": 64, "epochs": 20, "negatives": 1024, "seeds": [0, 1]},
}


def build_parser(prog: str = "factloom bench factcheck", description: str | None = __doc__) -> argparse.ArgumentParser:
    """The options shared by ``bench factcheck`` and ``bench audit``; dataset-dependent ones default to None."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--dataset", choices=sorted(DATASET_DEFAULTS), default="codex-s")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA / "codex", help="holds codex-s/, codex-m/ …")
    p.add_argument("--split", choices=["valid", "test"], default="test")
    p.add_argument("--out", type=Path)
    p.add_argument("--rank", type=int, help="ComplEx rank (default per dataset: 128 S, 64 M)")
    p.add_argument("--epochs", type=int, help="training epochs (default per dataset: 30 S, 20 M)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--reg", type=float, default=0.05)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--negatives", type=int,
                   help="sampled negatives per batch instead of all entities (default per dataset: all for S, "
                        "1024 for M; 0 means all)")
    p.add_argument("--ranks", type=int, nargs="+", help="one rank per seed (default: --rank for all)")
    p.add_argument("--seeds", type=int, nargs="+",
                   help="one scorer per seed, an ensemble (default per dataset: 0 1 2 for S, 0 1 for M)")
    p.add_argument("--method", choices=["gbdt", "logistic"], default="gbdt")
    p.add_argument("--features", choices=["all", "scores"], default="all", help="scorer details as features")
    p.add_argument("--fusion-folds", type=int, default=5, help="cross-fitted fusion folds; 0: a held-out part")
    p.add_argument("--group-by", choices=["object", "none"], default="object",
                   help="cross-fitting folds keep each object entity's facts together")
    p.add_argument("--deploy", choices=["fold", "refit"], default="fold",
                   help="new facts scored by their fold's model (exact certificate) or a refit on all")
    p.add_argument("--start", type=float, default=2.0, help="first certified threshold: START x fewest facts")
    p.add_argument("--calib-share", type=float, default=0.5, help="with --fusion-folds 0: the held-out share")
    p.add_argument("--scorer-calibration", choices=["none", "platt"], default="none",
                   help="per-relation Platt of the scorer as a fusion input (fitted on the fit part)")
    p.add_argument("--folds", type=int, default=5, help="with --split valid: report fold by fold")
    p.add_argument("--chunk", type=int, default=512, help="claims per verifier call")
    p.add_argument("--cache", type=Path, default=Path("/tmp/factloom-bench-scorers"))
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy machine)")
    return p


def apply_dataset_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options left unset with the dataset's recommended settings (``DATASET_DEFAULTS``)."""
    for key, value in DATASET_DEFAULTS[args.dataset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.negatives == 0:
        args.negatives = None
    return args


Facts = tuple[list[Triple], np.ndarray]


def load_setup(args: argparse.Namespace) -> tuple[list[Triple], Facts, Facts, Pipeline]:
    """Train (or load) the scorers and build the pipeline: (train, tuning facts, reported facts, pipeline).

    Tuning facts are ``valid`` + ``valid_negatives``; reported ones ``--split`` (+ its negatives), labels 1 / 0.
    """
    torch.set_num_threads(args.threads)
    root = args.data_dir / args.dataset
    if not (root / "train.txt").exists():
        raise SystemExit(f"{root} has no train.txt: --data-dir must hold {args.dataset}/")
    train, valid, valid_neg = (read_triples(root / f"{name}.txt") for name in ("train", "valid", "valid_negatives"))
    if args.split == "test":
        if not (root / "test.txt").exists():
            raise SystemExit(f"{root} has no test.txt (CoDEx-M's test split is held back): use --split valid")
        report, report_neg = read_triples(root / "test.txt"), read_triples(root / "test_negatives.txt")
    else:
        report, report_neg = valid, valid_neg
    types_path = args.data_dir / "entity2types.json"
    entity_types = json.loads(types_path.read_text()) if types_path.exists() else {}
    tv = TypeVerifier(TypeConstraints(min_support=1).learn(train, entity_types), entity_types)
    scorers = train_scorers(args, train, train + valid + valid_neg + report + report_neg)
    pipe = Pipeline(scorers, tv, args)
    tune = (valid + valid_neg, np.array([1] * len(valid) + [0] * len(valid_neg)))
    reported = (report + report_neg, np.array([1] * len(report) + [0] * len(report_neg)))
    return train, tune, reported, pipe


def object_folds(facts: list[Triple], folds: int) -> np.ndarray:
    """Each fact's fold from a hash of its object entity (``--split valid``'s honest cross-validation).

    Folds keep each object entity's facts together: random folds let the fusion profit from having
    seen the same entities' labels (CoDEx-S: random-fold valid accuracy ran 2 points above test).
    """
    return np.array([zlib.crc32(o.encode()) % folds for _, _, o in facts])


def main() -> None:
    args = apply_dataset_defaults(build_parser().parse_args())
    started = time.perf_counter()
    out = args.out or REPO / "bench" / "results" / f"factcheck-{args.dataset}.json"
    train, (tune_facts, tune_y), (facts, y), pipe = load_setup(args)
    scorers = pipe.scorers
    if args.split == "test":
        pipe.tune(tune_facts, tune_y, seed=0)
        t0 = time.perf_counter()
        assert pipe.fusion is not None
        raw, prob = pipe.fusion.scores(pipe.results(facts))
        speed = len(facts) / (time.perf_counter() - t0)
        base = pipe.baseline(facts, tune_facts, tune_y)
        points = operating(pipe.fusion, raw, y)
        folds_info: list[dict[str, Any]] = [pipe.fusion.meta()]
    else:
        fold = object_folds(facts, args.folds)
        prob, base = np.zeros(len(facts)), np.zeros(len(facts))
        per_fold, folds_info, speeds = [], [], []
        for k in range(args.folds):
            tr_idx, te_idx = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
            pipe.tune([facts[i] for i in tr_idx], y[tr_idx], seed=k)
            assert pipe.fusion is not None
            t0 = time.perf_counter()
            held = [facts[i] for i in te_idx]
            raw, prob[te_idx] = pipe.fusion.scores(pipe.results(held))
            speeds.append(len(held) / (time.perf_counter() - t0))
            base[te_idx] = pipe.baseline(held, [facts[i] for i in tr_idx], y[tr_idx])
            per_fold.append((te_idx, operating(pipe.fusion, raw, y[te_idx])))
            folds_info.append(pipe.fusion.meta())
        speed = float(np.median(speeds))
        points = {}
        for target in TARGETS:  # pooled over folds: each fold's thresholds on its own held-out facts
            acc = sum(f[1][target]["accepted"] for f in per_fold)
            err = sum(f[1][target]["error"] * f[1][target]["accepted"] for f in per_fold)
            points[target] = {
                "certified": all(f[1][target]["certified"] for f in per_fold),
                "threshold": (float(np.median(ts)) if (ts := [f[1][target]["threshold"] for f in per_fold
                                                              if f[1][target]["threshold"] is not None]) else None),
                "certified_folds": sum(bool(f[1][target]["certified"]) for f in per_fold),
                "automation": float(sum(f[1][target]["automation"] * len(f[0]) for f in per_fold) / len(facts)),
                "error": float(err / acc) if acc else 0.0, "accepted": int(acc),
                "accept_share": acc / len(facts),
                "folds": [{k: v for k, v in f[1][target].items() if k != "reason"} for f in per_fold],
                "point_estimate_automation": float(np.mean([f[1][target]["point_estimate"]["automation"]
                                                            for f in per_fold])),
            }
    pred = prob >= 0.5
    metrics = {
        "accuracy": float((pred == y).mean()), "f1": f1(pred, y), "ece": expected_calibration_error(prob.tolist(),
                                                                                                   y.tolist()),
        "facts_per_s": float(speed), "operating_points": points, "facts": int(len(y)),
        "baseline_complex_accuracy": float(((base >= 0.5) == y).mean()),
        "baseline_complex_f1": f1(base >= 0.5, y),
        "fusion": folds_info[0]["metrics"], "fusion_version": folds_info[0]["version"],
        "scorer_versions": [sc.version for sc in scorers],
    }
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    settings["train_facts"], settings["tune_facts"] = len(train), len(tune_facts)
    write_result(out, benchmark="factcheck", dataset=args.dataset, split=args.split, settings=settings,
                 metrics=metrics, started=started)
    print(f"{args.dataset} {args.split}: accuracy {metrics['accuracy']:.4f} (plain ComplEx "
          f"{metrics['baseline_complex_accuracy']:.4f}), F1 {metrics['f1']:.4f}, ECE {metrics['ece']:.4f}, "
          f"{speed:.0f} facts/s")
    for target, pt in points.items():
        print(f"  target {target}: certified {pt['certified']}, automation {pt['automation']:.3f}, "
              f"error {pt['error']:.4f} ({pt['accepted']} accepted)"
              + (f"; uncertified point estimate: automation {pt['point_estimate']['automation']:.3f}, "
                 f"error {pt['point_estimate']['error']:.4f}" if "point_estimate" in pt else ""))
    plot(prob, y, points if args.split == "test" else {}, out.with_suffix(""), f"{args.dataset} {args.split}",
         order_by=raw if args.split == "test" else prob + 1e-9 * np.random.default_rng(0).random(len(prob)))


if __name__ == "__main__":
    main()
