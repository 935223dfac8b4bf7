"""Continual link prediction on the LKGE snapshots (BENCHMARKS.md §4): re-training vs fine-tuning vs EWC.

Each set (``ENTITY``, ``FACT``, … under ``--data-dir``) has snapshots ``0..4``, each with
``train/valid/test.txt`` (head, relation, tail; Freebase mids) and cumulative ``entity2id.txt`` /
``relation2id.txt``. Checked on ENTITY and FACT: every snapshot's train, valid and test files hold
only the facts *new* at that snapshot (no fact of snapshot i's files occurs in any file of an earlier
snapshot), and snapshot i's ``entity2id.txt`` extends snapshot i−1's (ENTITY adds 2,908 entities a
snapshot; FACT 10,513 then 2,266 / 807 / 308 / 647). The entities "seen up to snapshot j" are
``entity2id.txt`` of j: a prefix of the ids, since the scorer appends new names in file order.

All arms use the platform's :class:`ComplExScorer`. ``retrain``: from scratch on the union of the
training facts of snapshots ≤ i, ``--epochs`` epochs. ``finetune`` and ``ewc`` grow the previous
snapshot's model (:meth:`~ComplExScorer.extend`) and learn the new facts as the platform's scorer
updates do (:func:`factloom.learn.continual.learn_facts`): ``--new-epochs`` passes over the new facts
that name a new entity or relation, then ``--update-epochs`` over the new facts — ``ewc``: with
``--replay`` old training facts (default: all of them) and the online EWC penalty (λ = ``--lam``, γ =
``--gamma``; the Fisher of each snapshot's new facts from ``--fisher-facts`` of them). Snapshot 0 is the
same training for every arm (same code, settings and seed), so it is trained once and copied; the time
ratios are of the updates, snapshots 1..4, in wall-clock and in the process's CPU time
(``cpu_time_ratio*``: on a shared machine the wall-clock ratios swing with other jobs; one torch thread,
so CPU time ≈ the work done).

After each snapshot i every arm is evaluated on the test sets of snapshots j ≤ i: head and tail
queries, ranks filtered against all known facts (train, valid, test) of snapshots ≤ j, among the
entities seen up to j; a model's MRR / Hits@k are averaged over those test sets weighted by their sizes.

Defaults: rank 100, softmax against the true entity and 1,000 sampled ones (``--negatives 0``: all),
Adagrad lr 0.1 (a fresh optimiser each update), N3 5e-2, batches of 1,000; re-training 10 epochs;
updates on the platform's :class:`~factloom.learn.continual.ScorerSchedule` (1 + 2 passes, λ = 0.01),
every old fact replayed. Today's figures: docs/learning.md ("Measured"); earlier settings and their
figures: docs/history/learning-measurements.md.
"""

from __future__ import annotations

import argparse
import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import DEFAULT_DATA, REPO, read_triples, write_result
from tqdm import tqdm

from factloom.learn.continual import ScorerSchedule, learn_facts
from factloom.model.ewc import ElasticWeights
from factloom.model.scorer import ComplExScorer

Triple = tuple[str, str, str]
ARMS = ("retrain", "finetune", "ewc")
SCHEDULE = ScorerSchedule()  # the platform's scorer updates: the EWC arm's defaults


@dataclass
class Snapshot:
    train: list[Triple]
    valid: list[Triple]
    test: list[Triple]
    entities: list[str]  # seen up to this snapshot, in id order
    relations: list[str]  # seen up to this snapshot, in order of first appearance


def load_set(root: Path, count: int) -> list[Snapshot]:
    snaps: list[Snapshot] = []
    for i in range(count):
        d = root / str(i)
        train, valid, test = (read_triples(d / f"{split}.txt") for split in ("train", "valid", "test"))
        ents = [line.split("\t")[0] for line in (d / "entity2id.txt").read_text().splitlines() if line.strip()]
        prev_e = snaps[-1].entities if snaps else []
        if ents[: len(prev_e)] != prev_e:
            raise SystemExit(f"{d}/entity2id.txt does not extend snapshot {i - 1}'s")
        facts = train + valid + test
        missing = {x for s, _, o in facts for x in (s, o)} - set(ents)
        if missing:
            raise SystemExit(f"{d}: {len(missing)} entities of the facts are not in entity2id.txt")
        rels = list(dict.fromkeys((snaps[-1].relations if snaps else []) + [p for _, p, _ in facts]))
        snaps.append(Snapshot(train, valid, test, ents, rels))
    return snaps


class Evaluator:
    """Filtered link prediction on each snapshot's test set; the filters are built once, as index tensors."""

    def __init__(self, snaps: list[Snapshot], batch_size: int = 2048) -> None:
        self.batch_size = batch_size
        last = snaps[-1]
        self.ent = {e: i for i, e in enumerate(last.entities)}
        self.rel = {r: i for i, r in enumerate(last.relations)}
        n_rel = len(self.rel)
        self.tests: list[dict[str, Any]] = []
        known = np.zeros((0, 3), dtype=np.int64)
        for snap in snaps:
            known = np.concatenate([known, self._ids(snap.train + snap.valid + snap.test)])
            test = self._ids(snap.test)
            item: dict[str, Any] = {"n_ent": len(snap.entities), "size": len(test)}
            for side, (q, a) in {"tail": (0, 2), "head": (2, 0)}.items():
                item[side] = self._filters(known[:, q] * n_rel + known[:, 1], known[:, a],
                                           test[:, q] * n_rel + test[:, 1], test[:, a])
                item[side]["query"] = torch.from_numpy(test[:, q])
                item[side]["rel"] = torch.from_numpy(test[:, 1])
                item[side]["target"] = torch.from_numpy(test[:, a])
            self.tests.append(item)

    def _ids(self, triples: list[Triple]) -> np.ndarray:
        return np.array([[self.ent[s], self.rel[p], self.ent[o]] for s, p, o in triples], dtype=np.int64).reshape(-1, 3)

    @staticmethod
    def _filters(keys: np.ndarray, answers: np.ndarray, qkeys: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
        """(row, entity) pairs to mask: every known answer of each query but its own target."""
        order = np.argsort(keys, kind="stable")
        keys, answers = keys[order], answers[order]
        lo, hi = np.searchsorted(keys, qkeys, "left"), np.searchsorted(keys, qkeys, "right")
        counts = hi - lo
        rows = np.repeat(np.arange(len(qkeys)), counts)
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        cols = answers[np.repeat(lo, counts) + offsets]
        drop = cols != targets[rows]
        return {"rows": torch.from_numpy(rows[drop]), "cols": torch.from_numpy(cols[drop])}

    @torch.no_grad()
    def ranks(self, scorer: ComplExScorer, j: int) -> np.ndarray:
        """Filtered 1-based ranks of the tail and head queries of test set ``j`` (2·size,)."""
        item, model = self.tests[j], scorer.model
        n_ent, n_rel, rank = item["n_ent"], len(scorer.relations), scorer.rank
        er, ei = model.ent.weight[:n_ent, :rank], model.ent.weight[:n_ent, rank:]  # (E_j, R)
        out = []
        for side, shift in (("tail", 0), ("head", n_rel)):
            f = item[side]
            for b0 in range(0, item["size"], self.batch_size):
                sl = slice(b0, b0 + self.batch_size)
                qr, qi, _ = model.query(f["query"][sl], f["rel"][sl] + shift)
                scores = qr @ er.T + qi @ ei.T  # (B, E_j)
                target = f["target"][sl]
                own = scores.gather(1, target[:, None])  # (B, 1)
                a, z = np.searchsorted(f["rows"].numpy(), [b0, b0 + len(target)])
                scores[f["rows"][a:z] - b0, f["cols"][a:z]] = -torch.inf
                out.append((1 + (scores > own).sum(1)).numpy())
        return np.concatenate(out)

    def evaluate(self, scorer: ComplExScorer, upto: int) -> list[dict[str, float]]:
        rows = []
        for j in range(upto + 1):
            r = self.ranks(scorer, j).astype(np.float64)
            rows.append({"mrr": float(np.mean(1 / r)), "hits_at_1": float(np.mean(r <= 1)),
                         "hits_at_10": float(np.mean(r <= 10)), "size": self.tests[j]["size"]})
        return rows


def weighted(rows: list[dict[str, float]], key: str) -> float:
    return sum(r[key] * r["size"] for r in rows) / sum(r["size"] for r in rows)


def run_set(name: str, snaps: list[Snapshot], args: argparse.Namespace) -> dict[str, Any]:
    evaluator = Evaluator(snaps)
    fit = {"batch_size": args.batch, "reg": args.reg, "negatives": args.negatives, "progress": False}
    results: dict[str, dict[str, Any]] = {a: {"evals": [], "seconds": [], "cpu": []} for a in args.arms}
    models: dict[str, ComplExScorer] = {}
    ewc: ElasticWeights | None = None
    schedule = ScorerSchedule(new_epochs=args.new_epochs, epochs=args.update_epochs, ewc_lambda=args.lam)
    rng = np.random.default_rng(args.seed)
    seen_train: list[Triple] = []
    bar = tqdm(total=len(snaps) * len(args.arms), desc=name)
    for i, snap in enumerate(snaps):
        base: tuple[ComplExScorer, float, float] | None = None
        for arm in args.arms:
            t0, c0 = time.perf_counter(), time.process_time()
            if arm == "retrain" or i == 0:
                if base is None:
                    torch.manual_seed(args.seed)  # the initial tables (fit seeds only its own shuffling)
                    scorer = ComplExScorer(snap.entities, snap.relations, rank=args.rank)
                    losses = scorer.fit(seen_train + snap.train, epochs=args.epochs, lr=args.lr, seed=args.seed, **fit)
                    base = scorer, time.perf_counter() - t0, time.process_time() - c0
                    results[arm].setdefault("losses", []).append([round(x, 4) for x in losses])
                scorer, seconds, cpu = (base[0] if arm == "retrain" else copy.deepcopy(base[0])), base[1], base[2]
                if arm == "ewc":
                    t1, c1 = time.perf_counter(), time.process_time()
                    fisher = scorer.fisher(snap.train, max_facts=args.fisher_facts, seed=args.seed,
                                           negatives=args.negatives)
                    ewc = ElasticWeights.from_model(scorer.model, fisher, lam=args.lam)
                    seconds += time.perf_counter() - t1
                    cpu += time.process_time() - c1
            else:
                scorer = models[arm]
                known_before = len(scorer.entities), len(scorer.relations)
                scorer.extend(snap.entities, snap.relations)
                old: list[Triple] = []
                if arm == "ewc":
                    n_old = len(seen_train) if args.replay is None else min(args.replay, len(seen_train))
                    old = [seen_train[k] for k in rng.choice(len(seen_train), n_old, replace=False)]
                learn_facts(scorer, snap.train, old, known_before=known_before, schedule=schedule,
                            ewc=ewc if arm == "ewc" else None, seed=args.seed + i, lr=args.update_lr, **fit)
                if arm == "ewc":
                    assert ewc is not None
                    fisher = scorer.fisher(snap.train, max_facts=args.fisher_facts, seed=args.seed + i,
                                           negatives=args.negatives)
                    ewc = scorer.align(ewc).consolidate(scorer.model, fisher, gamma=args.gamma)
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            models[arm] = scorer
            results[arm]["seconds"].append(seconds)
            results[arm]["cpu"].append(cpu)
            results[arm]["evals"].append(evaluator.evaluate(scorer, i))
            row = results[arm]["evals"][-1]
            bar.set_postfix(arm=arm, snapshot=i, mrr=f"{weighted(row, 'mrr'):.3f}", s=f"{seconds:.0f}")
            bar.update()
        seen_train += snap.train
    bar.close()
    return summarise(results)


def summarise(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    retrain = results.get("retrain")
    arms: dict[str, Any] = {}
    for arm, res in results.items():
        evals, seconds, cpu = res["evals"], res["seconds"], res["cpu"]
        final = evals[-1]
        matrix = [[round(r["mrr"], 4) for r in row] for row in evals]
        last = len(evals) - 1
        drops = [(matrix[j][j] - matrix[last][j]) / matrix[j][j] for j in range(last)]
        out: dict[str, Any] = {
            "mrr": round(weighted(final, "mrr"), 4), "hits_at_1": round(weighted(final, "hits_at_1"), 4),
            "hits_at_10": round(weighted(final, "hits_at_10"), 4),
            "mrr_per_snapshot": [round(weighted(row, "mrr"), 4) for row in evals],
            "mrr_matrix": matrix, "forgetting": round(max(drops, default=0.0), 4),
            "forgetting_per_snapshot": [round(d, 4) for d in drops],
            "train_seconds": [round(s, 1) for s in seconds], "train_seconds_total": round(sum(seconds), 1),
            "cpu_seconds": [round(s, 1) for s in cpu], "cpu_seconds_total": round(sum(cpu), 1),
        }
        if "losses" in res:  # re-training's epoch losses per snapshot: flat at the end = converged
            out["epoch_losses"] = res["losses"]
        if retrain is not None:
            ratios = [s / r for s, r in zip(seconds[1:], retrain["seconds"][1:], strict=True)]
            out["time_ratio"] = round(sum(seconds[1:]) / max(sum(retrain["seconds"][1:]), 1e-9), 4)
            out["time_ratio_per_snapshot"] = [round(x, 4) for x in ratios]
            out["time_ratio_max"] = round(max(ratios, default=1.0), 4)
            # the same from the process's CPU time: on a shared machine the wall-clock ratios above swing
            # with the other jobs' load (one torch thread, so CPU time ≈ the work done)
            cpu_ratios = [s / r for s, r in zip(cpu[1:], retrain["cpu"][1:], strict=True)]
            out["cpu_time_ratio"] = round(sum(cpu[1:]) / max(sum(retrain["cpu"][1:]), 1e-9), 4)
            out["cpu_time_ratio_per_snapshot"] = [round(x, 4) for x in cpu_ratios]
            out["cpu_time_ratio_max"] = round(max(cpu_ratios, default=1.0), 4)
        arms[arm] = out
    if retrain is not None:
        for out in arms.values():
            out["mrr_vs_retrain"] = round(out["mrr"] / arms["retrain"]["mrr"], 4)
    return {"arms": arms}


def plot(sets: dict[str, Any], stem: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(sets)
    arms = list(sets[names[0]]["arms"])
    fig, axes = plt.subplots(len(names), len(arms), figsize=(3.6 * len(arms), 3.3 * len(names)), squeeze=False)
    for row, name in enumerate(names):
        for col, arm in enumerate(arms):
            m = sets[name]["arms"][arm]["mrr_matrix"]
            grid = np.full((len(m), len(m)), np.nan)
            for i, values in enumerate(m):
                grid[i, : len(values)] = values
            ax = axes[row][col]
            ax.imshow(grid, vmin=0, vmax=0.6, cmap="viridis")
            for i in range(len(m)):
                for j in range(i + 1):
                    ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7, color="w")
            ax.set_title(f"{name} {arm}: MRR {sets[name]['arms'][arm]['mrr']:.3f}", fontsize=9)
            ax.set_xlabel("tested snapshot")
            ax.set_ylabel("learned up to")
    fig.tight_layout()
    fig.savefig(f"{stem}.png", dpi=110)
    plt.close(fig)
    print(f"wrote {stem}.png")


def main() -> None:
    p = argparse.ArgumentParser(prog="factloom bench continual", description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="lkge")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA / "lkge", help="../shared/data/lkge")
    p.add_argument("--sets", nargs="+", default=["ENTITY", "FACT"])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--snapshots", type=int, default=5, help="learn only the first N (a quick check)")
    p.add_argument("--rank", type=int, default=100)
    p.add_argument("--epochs", type=int, default=10, help="re-training (and snapshot 0) epochs")
    p.add_argument("--new-epochs", type=int, default=SCHEDULE.new_epochs,
                   help="update epochs on the new facts naming new entities")
    p.add_argument("--update-epochs", type=int, default=SCHEDULE.epochs,
                   help="then epochs on the new facts (EWC: with the replayed ones) per snapshot")
    p.add_argument("--lr", type=float, default=0.1, help="Adagrad, re-training")
    p.add_argument("--update-lr", type=float, default=0.1, help="Adagrad, updates (a fresh optimiser each)")
    p.add_argument("--reg", type=float, default=5e-2, help="N3 weight")
    p.add_argument("--negatives", type=int, default=1000, help="sampled softmax; 0 = all entities")
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--lam", type=float, default=SCHEDULE.ewc_lambda, help="EWC λ (Fisher normalised to max 1)")
    p.add_argument("--gamma", type=float, default=1.0, help="online EWC decay of older Fishers")
    p.add_argument("--replay", type=int, default=None,
                   help="old training facts replayed per EWC update (default: all of them)")
    p.add_argument("--fisher-facts", type=int, default=2000, help="facts sampled for each Fisher")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads; on 2 shared cores, 2 threads spent most of their time spinning in the kernel")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "continual.json")
    args = p.parse_args()
    args.negatives = args.negatives or None
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    sets = {}
    for name in args.sets:
        snaps = load_set(args.data_dir / name, args.snapshots)
        sets[name] = run_set(name, snaps, args)
        head = ("arm", "MRR", "H@1", "H@10", "forget", "time×", "max×", "sec")
        print(f"\n{name}: {head[0]:<9}" + "".join(f" {h:>{7 if h in ('forget', 'sec') else 6}}" for h in head[1:]))
        for arm, m in sets[name]["arms"].items():
            print(f"{'':<{len(name) + 2}}{arm:<9} {m['mrr']:>6.3f} {m['hits_at_1']:>6.3f} {m['hits_at_10']:>6.3f} "
                  f"{m['forgetting']:>7.3f} {m.get('time_ratio', 1.0):>6.3f} {m.get('time_ratio_max', 1.0):>6.3f} "
                  f"{m['train_seconds_total']:>7.0f}")
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("out",)}
    write_result(args.out, benchmark="continual", dataset=args.dataset, split="test", settings=settings,
                 metrics={"sets": sets}, started=started)
    plot(sets, args.out.with_suffix(""))


if __name__ == "__main__":
    main()
