"""Plausibility scorer: ComplEx with N3 regularisation, reciprocal relations and 1-N softmax training.

Entities and relations are names; an unseen name makes :meth:`ComplExScorer.score` abstain
(``None``) rather than crash. Per-relation Platt calibration turns raw scores into probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from factloom.verify.calibrate import Calibrator

__all__ = ["ComplExScorer"]

Triple = tuple[str, str, str]


class _ComplEx(torch.nn.Module):
    def __init__(self, n_ent: int, n_rel: int, rank: int, init: float = 1e-3) -> None:
        super().__init__()
        self.rank = rank
        self.ent = torch.nn.Embedding(n_ent, 2 * rank)
        self.rel = torch.nn.Embedding(2 * n_rel, 2 * rank)  # forward + reciprocal
        with torch.no_grad():
            self.ent.weight.mul_(init)
            self.rel.weight.mul_(init)

    def _parts(self, h: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        e, w = self.ent(h), self.rel(r)  # (B, 2R)
        return e[:, : self.rank], e[:, self.rank :], w[:, : self.rank], w[:, self.rank :]

    def query(self, h: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        hr, hi, rr, ri = self._parts(h, r)
        qr = hr * rr - hi * ri  # (B, R)
        qi = hr * ri + hi * rr
        return qr, qi, (hr, hi, rr, ri)

    def all_tails(self, h: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        qr, qi, parts = self.query(h, r)
        er, ei = self.ent.weight[:, : self.rank], self.ent.weight[:, self.rank :]
        return qr @ er.T + qi @ ei.T, parts  # (B, E)

    def pair(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        qr, qi, _ = self.query(h, r)
        e = self.ent(t)
        return (qr * e[:, : self.rank] + qi * e[:, self.rank :]).sum(-1)  # (B,)


class ComplExScorer:
    """Train on true triples, score (s, p, o) name triples; ``None`` for unseen names."""

    version_prefix = "complex-n3"

    def __init__(self, entities: Sequence[str], relations: Sequence[str], rank: int = 64) -> None:
        self.entities = {e: i for i, e in enumerate(dict.fromkeys(entities))}
        self.relations = {r: i for i, r in enumerate(dict.fromkeys(relations))}
        self.rank = rank
        self.model = _ComplEx(len(self.entities), len(self.relations), rank)
        self.calibrators: dict[str, Calibrator] = {}
        self.global_calibrator: Calibrator | None = None

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

    def fit(self, triples: Sequence[Triple], *, epochs: int = 50, batch_size: int = 1000, lr: float = 0.1,
            reg: float = 5e-2, seed: int = 0, progress: bool = True) -> list[float]:
        """1-N softmax over all tails for (h, r) and (t, r⁻¹); N3 penalty on the factors. Returns epoch losses."""
        torch.manual_seed(seed)
        ids, keep = self._ids(triples)
        ids = ids[keep]
        n_rel = len(self.relations)
        both = np.concatenate([ids, np.stack([ids[:, 2], ids[:, 1] + n_rel, ids[:, 0]], 1)])  # (2N, 3)
        data = torch.from_numpy(both)
        opt = torch.optim.Adagrad(self.model.parameters(), lr=lr)
        losses: list[float] = []
        self.model.train()
        for _ in tqdm(range(epochs), desc="scorer", disable=not progress):
            perm = data[torch.randperm(len(data))]
            total = 0.0
            for i in range(0, len(perm), batch_size):
                b = perm[i : i + batch_size]
                logits, parts = self.model.all_tails(b[:, 0], b[:, 1])
                loss = torch.nn.functional.cross_entropy(logits, b[:, 2])
                tail = self.model.ent(b[:, 2])
                factors = [torch.sqrt(parts[0] ** 2 + parts[1] ** 2), torch.sqrt(parts[2] ** 2 + parts[3] ** 2),
                           torch.sqrt(tail[:, : self.rank] ** 2 + tail[:, self.rank :] ** 2)]
                n3 = sum(torch.sum(torch.abs(f) ** 3) for f in factors) / len(b)
                opt.zero_grad()
                (loss + reg * n3).backward()
                opt.step()
                total += float(loss.detach()) * len(b)
            losses.append(total / max(1, len(perm)))
        self.model.eval()
        return losses

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

    def score(self, triples: Sequence[Triple]) -> list[float | None]:
        """Calibrated probability of truth per triple (sigmoid of the raw score before calibration)."""
        raw = self.raw_scores(triples)
        out: list[float | None] = []
        for (_, p, _), s in zip(triples, raw, strict=True):
            if s is None:
                out.append(None)
                continue
            cal = self.calibrators.get(p, self.global_calibrator)
            out.append(float(cal.predict([s])[0]) if cal is not None else float(1 / (1 + np.exp(-s))))
        return out

    def save(self, path: Path) -> None:
        state: dict[str, Any] = {"entities": list(self.entities), "relations": list(self.relations),
                                 "rank": self.rank, "model": self.model.state_dict(),
                                 "calibrators": self.calibrators, "global_calibrator": self.global_calibrator}
        torch.save(state, path)

    @classmethod
    def load(cls, path: Path) -> ComplExScorer:
        state = torch.load(path, weights_only=False)
        scorer = cls(state["entities"], state["relations"], rank=state["rank"])
        scorer.model.load_state_dict(state["model"])
        scorer.model.eval()
        scorer.calibrators = state["calibrators"]
        scorer.global_calibrator = state["global_calibrator"]
        return scorer
