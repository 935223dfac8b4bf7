"""Plausibility scorer: ComplEx with N3 regularisation, reciprocal relations and 1-N softmax training.

Entities and relations are names; an unseen name makes :meth:`ComplExScorer.score` abstain
(``None``) rather than crash. Per-relation Platt calibration turns raw scores into probabilities.
:meth:`ComplExScorer.features` adds, in one batched pass, what a learned fusion uses beside the
score: the filtered rank of the tail among all tails of ``(h, r, ?)`` and of the head among all heads
of ``(?, r, t)`` (other known true facts removed), and how often the entities and the
(relation, entity) pairs occur in the training facts.

It learns incrementally: :meth:`ComplExScorer.extend` grows the vocabularies and tables for a new
snapshot's names, :meth:`ComplExScorer.fit` continues training with an optional EWC penalty
(:mod:`factloom.model.ewc`) and ``keep_known``, and :meth:`ComplExScorer.fisher` measures the Fisher
that penalty needs. Both run data-parallel across processes with ``distributed=True``
(:mod:`factloom.model.distributed`).

The tensor operator and its loss are :class:`~factloom.model.complex.ComplEx`; the filtered-rank and
frequency lookups over the training facts are :class:`~factloom.model.known_facts.KnownFacts`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from factloom.model.calibrate import Calibrator
from factloom.model.complex import ComplEx
from factloom.model.distributed import all_reduce_sum_, process_group, replicate, shard
from factloom.model.ewc import ElasticWeights, empirical_fisher, grow_embedding
from factloom.model.known_facts import KnownFacts

__all__ = ["ComplExScorer", "FEATURE_NAMES"]

Triple = tuple[str, str, str]

# per-triple numbers that ComplExScorer.features returns, in this order
FEATURE_NAMES = ("raw", "probability", "log_tail_rank", "log_head_rank", "tail_z", "head_z", "log_head_degree",
                 "log_tail_degree", "log_head_rel", "log_rel_tail", "log_tails_per_head", "log_heads_per_tail")


class ComplExScorer:
    """Train on true triples, score (s, p, o) name triples; ``None`` for unseen names."""

    version_prefix = "complex-n3"

    def __init__(self, entities: Sequence[str], relations: Sequence[str], rank: int = 64) -> None:
        self.entities = {e: i for i, e in enumerate(dict.fromkeys(entities))}
        self.relations = {r: i for i, r in enumerate(dict.fromkeys(relations))}
        self.rank = rank
        self.model = ComplEx(len(self.entities), len(self.relations), rank)
        self.calibrators: dict[str, Calibrator] = {}
        self.global_calibrator: Calibrator | None = None
        self.known = np.zeros((0, 3), dtype=np.int64)  # training facts by id, (N, 3)
        self.hparams: dict[str, Any] = {"rank": rank}
        self._index()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(entities={len(self.entities)}, relations={len(self.relations)}, "
                f"rank={self.rank}, known={len(self.known)})")

    @property
    def version(self) -> str:
        """Model family, rank, vocabulary and training-set sizes, and a digest of the training settings."""
        digest = hashlib.sha256(json.dumps(self.hparams, sort_keys=True, default=str).encode()).hexdigest()[:6]
        return f"{self.version_prefix}-r{self.rank}-e{len(self.entities)}-k{len(self.known)}-{digest}"

    def _index(self) -> None:
        """Lookups over the known facts: filtered-rank masks and frequency counts."""
        self._facts = KnownFacts(self.known, len(self.entities), len(self.relations))

    @classmethod
    def from_triples(cls, triples: Sequence[Triple], rank: int = 64) -> ComplExScorer:
        ents = [x for s, _, o in triples for x in (s, o)]
        return cls(ents, [p for _, p, _ in triples], rank=rank)

    def _ids(self, triples: Sequence[Triple]) -> tuple[np.ndarray, np.ndarray]:
        keep = np.array([s in self.entities and p in self.relations and o in self.entities
                         for s, p, o in triples], dtype=bool)
        ids = np.array([[self.entities[s], self.relations[p], self.entities[o]] if k else [0, 0, 0]
                        for (s, p, o), k in zip(triples, keep, strict=True)], dtype=np.int64).reshape(-1, 3)
        return ids, keep

    def extend(self, entities: Sequence[str], relations: Sequence[str]) -> tuple[int, int]:
        """Add the names not known yet, growing the tables; returns (new entities, new relations).

        New entity rows are appended, so old entity ids stay. The relation table holds the forward
        rows, then the reciprocal ones (id ``r + n_rel``): with ``k`` new relations the reciprocal
        block moves from ``n`` to ``n + k`` and the new reciprocal rows follow it,
        ``[fwd_old, fwd_new, rec_old, rec_new]``. Every old row keeps its values bit-identically at its
        (possibly new) position; an :class:`ElasticWeights` taken before is mapped onto the new layout by
        :meth:`align`. The filtered-rank and frequency lookups are rebuilt for the new sizes.
        """
        new_ents = [e for e in dict.fromkeys(entities) if e not in self.entities]
        new_rels = [r for r in dict.fromkeys(relations) if r not in self.relations]
        n_rel, k = len(self.relations), len(new_rels)
        if new_ents:
            self.model.ent = grow_embedding(self.model.ent, len(new_ents))
            self.entities.update((e, i) for i, e in enumerate(new_ents, len(self.entities)))
        if new_rels:
            grown = grow_embedding(self.model.rel, 2 * k)  # [fwd_old, rec_old, new_a, new_b]
            order = torch.cat([torch.arange(n_rel), torch.arange(2 * n_rel, 2 * n_rel + k),
                               torch.arange(n_rel, 2 * n_rel), torch.arange(2 * n_rel + k, 2 * n_rel + 2 * k)])
            with torch.no_grad():
                grown.weight.copy_(grown.weight[order])
            self.model.rel = grown
            self.relations.update((r, i) for i, r in enumerate(new_rels, n_rel))  # known: forward ids, unchanged
        if new_ents or new_rels:
            self._index()
        return len(new_ents), len(new_rels)

    def align(self, ewc: ElasticWeights) -> ElasticWeights:
        """``ewc`` (taken when this scorer had fewer names) on the current table layout: entity rows are
        a prefix; the old reciprocal relation rows move to ``n_rel + r`` as :meth:`extend` moved them.
        Rows added since have no Fisher and their anchor is their current value."""
        name = "rel.weight"
        if name not in ewc.anchor or ewc.anchor[name].shape[0] == self.model.rel.weight.shape[0]:
            return ewc
        m, n = ewc.anchor[name].shape[0] // 2, len(self.relations)  # relations then and now
        rows = torch.cat([torch.arange(m), torch.arange(n, n + m)])  # old row i -> new row rows[i]
        anchor, fisher = dict(ewc.anchor), dict(ewc.fisher)
        anchor[name] = self.model.rel.weight.detach().clone()
        anchor[name][rows] = ewc.anchor[name]
        fisher[name] = ewc.fisher[name].new_zeros(anchor[name].shape)
        fisher[name][rows] = ewc.fisher[name]
        return ElasticWeights(anchor, fisher, ewc.lam)

    def _both(self, ids: np.ndarray) -> torch.Tensor:
        """Facts (N, 3) and their reciprocals (t, r + n_rel, h): (2N, 3)."""
        n_rel = len(self.relations)
        return torch.from_numpy(np.concatenate([ids, np.stack([ids[:, 2], ids[:, 1] + n_rel, ids[:, 0]], 1)]))

    def fit(self, triples: Sequence[Triple], *, epochs: int = 50, batch_size: int = 1000, lr: float = 0.1,
            reg: float = 5e-2, seed: int = 0, progress: bool = True, negatives: int | None = None,
            ewc: ElasticWeights | None = None, keep_known: bool = False, distributed: bool = False) -> list[float]:
        """1-N softmax over all tails for (h, r) and (t, r⁻¹); N3 penalty on the factors. Returns epoch losses.

        ``negatives``: softmax over the true tail and that many entities sampled per batch instead of all
        entities — much cheaper on a large graph, a little less accurate.
        ``ewc``: continue training an existing model with this penalty added to every batch's loss
        (aligned to the current layout first, see :meth:`align`); the optimiser starts afresh.
        ``keep_known``: the known facts (filtered ranks, frequency features) become the union of the
        old known facts and ``triples`` instead of ``triples`` alone — for incremental updates.
        ``distributed``: data-parallel over the default process group (:mod:`factloom.model.distributed`):
        every rank calls ``fit`` with the same arguments (and the same ``ewc``), draws the same batches
        and negatives from ``seed``, and computes the loss of its share of each batch; DDP all-reduces
        the gradients, so the replicas start from rank 0's tables, stay identical and take the steps one
        process would take on the whole batches. The returned losses are the whole batches'. Without a
        process group (or in a world of one) it is the one-process loop.

        Training runs on the device the tables are on.
        """
        torch.manual_seed(seed)
        ids, keep = self._ids(triples)
        ids = ids[keep]
        if keep_known and len(self.known):
            both = np.concatenate([self.known, ids])
            _, first = np.unique(both, axis=0, return_index=True)
            self.known = both[np.sort(first)]
        else:
            self.known = ids
        self.hparams.update(epochs=epochs, batch_size=batch_size, lr=lr, reg=reg, seed=seed, negatives=negatives)
        if ewc is not None:
            self.hparams.update(ewc_lambda=ewc.lam)
            ewc = self.align(ewc)
        self._index()
        data = self._both(ids).to(self.model.ent.weight.device)  # (2N, 3)
        opt = torch.optim.Adagrad(self.model.parameters(), lr=lr)
        losses: list[float] = []
        self.model.train()
        rank, world = process_group() if distributed else (0, 1)
        step = self._replicated_step(reg, negatives, ewc, world) if world > 1 else None
        for _ in tqdm(range(epochs), desc="scorer", disable=not progress):
            perm = data[torch.randperm(len(data))]
            total = 0.0
            for i in range(0, len(perm), batch_size):
                b = perm[i : i + batch_size]
                if step is not None:  # data-parallel: this rank's rows of the batch
                    objective, loss_sum = step(shard(b, rank, world), len(b))
                    opt.zero_grad()
                    objective.backward()  # DDP averages the gradients over the ranks here
                    opt.step()
                    total += float(loss_sum)
                    continue
                loss, factors = self.model.loss(b, negatives)
                n3 = sum(torch.sum(torch.abs(f) ** 3) for f in factors) / len(b)
                opt.zero_grad()
                (loss + reg * n3).backward()
                if ewc is not None:
                    ewc.add_gradient_(self.model)  # the penalty's gradient, without its graph
                opt.step()
                total += float(loss.detach()) * len(b)
            if step is not None:
                summed = data.new_tensor([total], dtype=torch.float64)
                all_reduce_sum_([summed])
                total = float(summed)
            losses.append(total / max(1, len(perm)))
        self.model.eval()
        return losses

    def _replicated_step(self, reg: float, negatives: int | None, ewc: ElasticWeights | None,
                         world: int) -> torch.nn.Module:
        """The DDP-wrapped objective of one rank's shard of a batch of ``whole`` rows:
        ``world / whole · (Σ cross-entropy + reg · Σ N3) + penalty`` — once DDP has averaged the ranks'
        gradients, the gradient of the one-process objective (mean loss + reg · N3 / B + penalty).
        Returns (objective, the shard's summed loss)."""
        def objective(b: torch.Tensor, whole: int) -> tuple[torch.Tensor, torch.Tensor]:
            loss_sum, factors = self.model.loss(b, negatives, reduction="sum")
            n3 = sum(torch.sum(torch.abs(f) ** 3) for f in factors)
            total = (loss_sum + reg * n3) * (world / whole)
            if ewc is not None:  # the same on every rank: averaging leaves it whole
                total = total + ewc.penalty(self.model)
            return total, loss_sum.detach()
        return replicate(self.model, objective)

    def fisher(self, triples: Sequence[Triple], *, batch_size: int = 1000, max_facts: int | None = 20000,
               seed: int = 0, negatives: int | None = None, distributed: bool = False) -> dict[str, torch.Tensor]:
        """Empirical Fisher (:func:`empirical_fisher`) of the 1-N softmax loss, both directions, on the
        known-name ``triples`` or a sample of ``max_facts`` of them; no N3 term (it is a prior, not data).

        ``negatives``: of the sampled softmax :meth:`fit` trains with (``None``: over every entity),
        its negatives drawn from ``seed`` — the Fisher of the objective the model learns, at its cost.

        ``distributed``: every rank of the default process group calls it with the same arguments on
        the same parameters and measures every ``world``-th batch; the squared-gradient sums are
        all-reduced before the normalisation, so every rank returns the same Fisher, the one-process one.
        """
        ids, keep = self._ids(triples)
        ids = ids[keep]
        rng = np.random.default_rng(seed)
        if max_facts is not None and len(ids) > max_facts:
            ids = ids[rng.choice(len(ids), max_facts, replace=False)]
        data = self._both(ids)  # (2N, 3)
        data = data[torch.from_numpy(rng.permutation(len(data)))].to(self.model.ent.weight.device)
        batches = [data[i : i + batch_size] for i in range(0, len(data), batch_size)]
        rank, world = process_group() if distributed else (0, 1)
        if negatives is not None:
            torch.manual_seed(seed)
        return empirical_fisher(self.model, batches[rank::world], lambda b: self.model.loss(b, negatives)[0],
                                reduce=all_reduce_sum_ if world > 1 else None)

    def raw_scores(self, triples: Sequence[Triple], batch_size: int = 4096) -> list[float | None]:
        """Mean of forward and reciprocal ComplEx scores, batched; ``None`` where a name is unseen."""
        ids, keep = self._ids(triples)
        out = np.full(len(triples), np.nan)
        n_rel = len(self.relations)
        with torch.no_grad():
            for i in range(0, len(ids), batch_size):
                b = torch.from_numpy(ids[i : i + batch_size])
                fwd = self.model.pair(b[:, 0], b[:, 1], b[:, 2])
                rev = self.model.pair(b[:, 2], b[:, 1] + n_rel, b[:, 0])
                out[i : i + batch_size] = ((fwd + rev) / 2).numpy()
        return [float(v) if k else None for v, k in zip(out, keep, strict=True)]

    def _filtered_ranks(self, q: torch.Tensor, r: torch.Tensor, target: torch.Tensor,
                        candidates: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """1-based rank of ``target`` among all entities (the first ``candidates``) for queries ``(q, r, ?)``,
        other known answers removed, and its score's z-value among those entities' scores."""
        scores, _ = self.model.all_tails(q, r)  # (B, E)
        scores = scores[:, :candidates]  # (B, C)
        z = (scores.gather(1, target[:, None])[:, 0] - scores.mean(1)) / (scores.std(1) + 1e-9)  # (B,)
        for row, (qi, ri, ti) in enumerate(zip(q.tolist(), r.tolist(), target.tolist(), strict=True)):
            known = self._facts.answers(qi, ri)
            if known is not None:
                known = known[(known != ti) & (known < scores.shape[1])]
                scores[row, torch.from_numpy(known)] = -torch.inf
        own = scores.gather(1, target[:, None])  # (B, 1)
        return (1 + (scores > own).sum(1)).numpy().astype(np.float64), z.numpy().astype(np.float64)

    def reciprocal_ranks(self, triples: Sequence[Triple], *, candidates: int | None = None,
                         batch_size: int = 1024) -> np.ndarray:
        """Filtered reciprocal rank of each fact's tail and head (the link-prediction protocol), 0 where a
        name is unseen; ``candidates``: rank among the first that many entities only (those a smaller,
        earlier version of this scorer knew: :meth:`extend` appends), every entity where ``None``.

        Shapes:
            - **output:** ``(N, 2)``, tail then head
        """
        ids, keep = self._ids(triples)
        n = len(self.entities) if candidates is None else min(candidates, len(self.entities))
        keep &= (ids[:, 0] < n) & (ids[:, 2] < n)
        n_rel = len(self.relations)
        out = np.zeros((len(ids), 2))
        with torch.no_grad():
            for i in range(0, len(ids), batch_size):
                b = torch.from_numpy(ids[i : i + batch_size])
                for col, (q, r, t) in enumerate(((b[:, 0], b[:, 1], b[:, 2]), (b[:, 2], b[:, 1] + n_rel, b[:, 0]))):
                    out[i : i + batch_size, col] = 1.0 / self._filtered_ranks(q, r, t, candidates=n)[0]
        return out * keep[:, None]

    def features(self, triples: Sequence[Triple], batch_size: int = 1024) -> list[dict[str, float] | None]:
        """Per triple the numbers of :data:`FEATURE_NAMES` (one batched pass), ``None`` where a name is unseen."""
        ids, keep = self._ids(triples)
        raw = self.raw_scores(triples)
        probs = self.score(triples, raw)
        n_rel = len(self.relations)
        tail_rank, head_rank, tail_z, head_z = (np.ones(len(ids)) for _ in range(4))
        with torch.no_grad():
            for i in range(0, len(ids), batch_size):
                b = torch.from_numpy(ids[i : i + batch_size])
                sl = slice(i, i + batch_size)
                tail_rank[sl], tail_z[sl] = self._filtered_ranks(b[:, 0], b[:, 1], b[:, 2])
                head_rank[sl], head_z[sl] = self._filtered_ranks(b[:, 2], b[:, 1] + n_rel, b[:, 0])
        cols = {"log_tail_rank": np.log(tail_rank), "log_head_rank": np.log(head_rank), "tail_z": tail_z,
                "head_z": head_z, **self._facts.frequencies(ids)}
        out: list[dict[str, float] | None] = []
        for i, k in enumerate(keep):
            if not k:
                out.append(None)
                continue
            row = {"raw": float(raw[i] or 0.0), "probability": float(probs[i] or 0.0)}
            row.update({name: float(col[i]) for name, col in cols.items()})
            out.append(row)
        return out

    def unseen(self, triple: Triple) -> str | None:
        """A readable reason the scorer cannot judge ``triple``, or ``None`` when it can."""
        s, p, o = triple
        missing = [f"{what} '{name}'" for what, name, table in (
            ("subject", s, self.entities), ("relation", p, self.relations), ("object", o, self.entities))
            if name not in table]
        return f"unseen by the scorer: {', '.join(missing)}" if missing else None

    def calibrate(self, triples: Sequence[Triple], labels: Sequence[int], *, min_per_relation: int = 20) -> None:
        """Per-relation Platt calibration where a relation has enough labelled facts of both kinds."""
        raw = self.raw_scores(triples)
        rows = [(t[1], s, y) for t, s, y in zip(triples, raw, labels, strict=True) if s is not None]
        self.global_calibrator = Calibrator().fit([s for _, s, _ in rows], [y for *_, y in rows])
        for rel in {r for r, _, _ in rows}:
            sub = [(s, y) for r, s, y in rows if r == rel]
            ys = {y for _, y in sub}
            if len(sub) >= min_per_relation and ys == {0, 1}:
                self.calibrators[rel] = Calibrator().fit([s for s, _ in sub], [y for _, y in sub])

    def score(self, triples: Sequence[Triple], raw: Sequence[float | None] | None = None) -> list[float | None]:
        """Calibrated probability of truth per triple (sigmoid of the raw score before calibration)."""
        raw = self.raw_scores(triples) if raw is None else raw
        values = np.array([np.nan if v is None else v for v in raw], dtype=np.float64)
        out = 1 / (1 + np.exp(-np.nan_to_num(values)))
        rels = np.array([p for _, p, _ in triples], dtype=object)
        ok = ~np.isnan(values)
        for rel in set(rels[ok].tolist()) if len(rels) else ():
            cal = self.calibrators.get(rel, self.global_calibrator)
            if cal is not None:
                mask = ok & (rels == rel)
                out[mask] = cal.predict(values[mask])
        return [float(v) if k else None for v, k in zip(out, ok, strict=True)]

    def save(self, path: Path) -> None:
        state: dict[str, Any] = {"entities": list(self.entities), "relations": list(self.relations),
                                 "rank": self.rank, "model": self.model.state_dict(),
                                 "calibrators": self.calibrators, "global_calibrator": self.global_calibrator,
                                 "known": torch.from_numpy(self.known), "hparams": self.hparams}
        torch.save(state, path)

    @classmethod
    def load(cls, path: Path) -> ComplExScorer:
        state = torch.load(path, weights_only=False)
        scorer = cls(state["entities"], state["relations"], rank=state["rank"])
        scorer.model.load_state_dict(state["model"])
        scorer.model.eval()
        scorer.calibrators = state["calibrators"]
        scorer.global_calibrator = state["global_calibrator"]
        scorer.known = state.get("known", torch.zeros((0, 3), dtype=torch.int64)).numpy()
        scorer.hparams = state.get("hparams", {"rank": state["rank"]})
        scorer._index()
        return scorer
