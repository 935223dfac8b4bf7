"""Re-certification: the evidence of one stream and its live accept / reject certificates.

:class:`AuditLedger` holds the evidence — validation facts (weight 1), facts a reviewer decided
because they fell between the thresholds (weight 1: every one of them is labelled) and audited facts
(weight :math:`1/\\pi_h`, Horvitz & Thompson 1952, :mod:`factloom.verify.audit.sampling`) — and
re-runs the fixed-sequence test of ``certify.py`` over a grid of candidate thresholds fixed at the
start from validation scores alone, with the weighted bound of :mod:`factloom.verify.audit.bounds`.

*Anytime validity* comes from spending the error budget across looks: look ``k`` (the first is the
validation certificate) tests at :math:`\\alpha_k = \\alpha / (k(k+1))`, and
:math:`\\sum_k \\alpha_k = \\alpha`. Under fixed-sequence testing a false certificate at any look needs
the first threshold whose true error exceeds the target to pass at that look, so by the union bound

    P(at some look, some certified threshold has error > target) <= alpha

for facts exchangeable with the evidence, however often and whenever the certificate is looked at.
A look is taken only when the labelled evidence has grown by ``growth`` (default 1.1x), so the number
of looks grows with the logarithm of the labels, not with the batches, and a look only ever loosens:
a threshold an earlier look certified stays covered by that look's budget. Every batch the current
threshold is checked again on all evidence at the level it was issued at; these checks can only
*tighten*, which never makes a certificate less valid, so they cost no budget:

* the bound at the current threshold is recomputed; above the target, the threshold moves at once to
  the loosest stricter candidate that still passes (or to none: nothing is auto-accepted);
* drift: when the lower confidence bound of the error among the latest batch's labelled facts above
  the threshold (at :math:`\\alpha / (b(b+1))` for batch ``b``) exceeds the target, the facts are no
  longer exchangeable with the evidence; everything before that batch is dropped (validation
  included) and nothing is certified until fresh labels certify again.

The reject side is the mirror problem (true facts among auto-rejected ones), with its own target.
Everything here is numpy / scipy: no settings, no database; :meth:`AuditLedger.as_dict` /
:meth:`AuditLedger.from_dict` round-trip through JSON so a worker can keep one ledger per kb.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from factloom.verify.audit.bounds import (
    LiveCertificate,
    certify_weighted,
    kish_effective,
    look_alpha,
    poststratify,
    stratum_of,
    weighted_lower_bound,
)
from factloom.verify.certify import min_clean_accepts

__all__ = ["AuditLedger"]


def _looser(old: LiveCertificate | None, new: LiveCertificate) -> LiveCertificate:
    if old is None or old.threshold is None or (new.threshold is not None and new.threshold <= old.threshold):
        return new
    return old


def _grid(scores: np.ndarray, target: float, alpha: float, start: float, first_share: float,
          growth: float) -> list[float]:
    """Candidate thresholds from scores alone (no label): top-``n`` blocks growing geometrically."""
    s = np.sort(scores)[::-1]
    if not len(s):
        return []
    n0 = min(int(np.ceil(start * min_clean_accepts(target, alpha))), max(1, int(first_share * len(s))))
    sizes, n = [], float(max(1, n0))
    while n < len(s):
        sizes.append(int(n))
        n *= growth
    sizes.append(len(s))
    return [float(s[i - 1]) for i in sorted(set(sizes))]


@dataclass
class AuditLedger:
    """The evidence of one stream (one kb) and its live accept / reject certificates.

    Create with :meth:`start` from the validation facts; then per batch :meth:`add` the labels that
    arrived (review decisions with weight 1, audit labels with weight ``1 / pi``) and :meth:`update`.
    Scores are the fusion's log-odds (any score where higher means more likely true will do).
    """

    target: float
    reject_target: float
    alpha: float = 0.05
    growth: float = 1.1
    accept_grid: list[float] = field(default_factory=list)
    reject_grid: list[float] = field(default_factory=list)  # on negated scores
    scores: list[float] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    accept_seen: list[float] = field(default_factory=list)  # the strata's sizes (see ``sizes_fixed``), per grid
    reject_seen: list[float] = field(default_factory=list)
    sizes_fixed: bool = False  # sizes from the validation facts; after a drift, from the facts seen since
    batch_seen: list[list[float]] = field(default_factory=lambda: [[], []])  # the current batch's share of those
    seen_batch: int = -1  # the batch ``batch_seen`` counts
    look: int = 0
    looked_at: float = 0.0  # labelled facts at the last look
    batch: int = 0
    drifts: int = 0
    accept: LiveCertificate | None = None
    reject: LiveCertificate | None = None

    @classmethod
    def start(cls, scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray, *, target: float,
              reject_target: float | None = None, alpha: float = 0.05, start: float = 2.0,
              first_share: float = 0.05, grid_growth: float = 1.02, growth: float = 1.1) -> AuditLedger:
        """The validation certificate (look 1, at ``alpha / 2``) and a candidate grid from validation scores.

        The first candidate accepts ``start`` times the fewest facts that could certify, but at most
        ``first_share`` of the validation facts, so a target validation cannot reach still has a
        small first block that the stream's labels can fill.
        """
        if not 0.0 < target < 1.0:
            raise ValueError(f"target must be in (0, 1), got {target}")
        rt = target if reject_target is None else reject_target
        s = np.asarray(scores, dtype=np.float64)
        ledger = cls(target=target, reject_target=rt, alpha=alpha, growth=growth,
                     accept_grid=_grid(s, target, look_alpha(alpha, 1), start, first_share, grid_growth),
                     reject_grid=_grid(-s, rt, look_alpha(alpha, 1), start, first_share, grid_growth))
        ledger.add(s, labels, np.ones(len(s)))
        ledger.sizes_fixed = True
        ledger._look()
        ledger.batch = 1  # stream batches count from 1; validation is batch 0
        return ledger

    def add(self, scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray,
            weights: Sequence[float] | np.ndarray, seen: Sequence[float] | np.ndarray | None = None) -> None:
        """Labelled facts of the current batch: 1 true, 0 false; weight ``1 / inclusion probability``.

        ``seen``: the scores of every fact of the batch, labelled or not (the strata's sizes); without
        it the weights estimate them.
        """
        if not len(scores) == len(labels) == len(weights):
            raise ValueError("scores, labels and weights must have equal lengths")
        if any(w < 1.0 for w in weights):
            raise ValueError("weights are inverse inclusion probabilities: at least 1")
        if self.seen_batch != self.batch:
            self.batch_seen, self.seen_batch = [[], []], self.batch
        for k, (grid, x) in enumerate(((self.accept_grid, 1.0), (self.reject_grid, -1.0))):
            n = len(grid) + 1
            counts = (np.bincount(stratum_of(x * np.asarray(seen, dtype=np.float64), np.asarray(grid)), minlength=n)
                      if seen is not None else
                      np.bincount(stratum_of(x * np.asarray(scores, dtype=np.float64), np.asarray(grid)),
                                  weights=np.asarray(weights, dtype=np.float64), minlength=n))
            total = "accept_seen" if k == 0 else "reject_seen"
            if not self.sizes_fixed:
                setattr(self, total, list(np.asarray(getattr(self, total) or [0.0] * n) + counts))
            self.batch_seen[k] = list(np.asarray(self.batch_seen[k] or [0.0] * n) + counts)
        self.scores += [float(x) for x in scores]
        self.labels += [int(x) for x in labels]
        self.weights += [float(x) for x in weights]
        self.batches += [self.batch] * len(scores)

    @property
    def accept_threshold(self) -> float | None:
        return self.accept.threshold if self.accept else None

    @property
    def reject_threshold(self) -> float | None:
        """Facts with score ``<=`` this are auto-rejected (``None``: none are)."""
        if self.reject is None or self.reject.threshold is None:
            return None
        t = -self.reject.threshold
        return t if self.accept_threshold is None or t < self.accept_threshold else None

    def update(self) -> dict[str, Any]:
        """After a batch's :meth:`add`: drift check, tightening check, and a look when the labels grew enough."""
        events = []
        if self._drift():
            events.append("drift")
        events += self._tighten()
        labelled = float(len(self.labels))
        if self.look == 0 or labelled >= self.growth * max(self.looked_at, 1.0):
            self._look()
            events.append(f"look {self.look}")
        self.batch += 1
        return {"batch": self.batch - 1, "events": events, "look": self.look,
                "accept": self.accept_threshold, "reject": self.reject_threshold,
                "accept_bound": self.accept.bound if self.accept else None,
                "reject_bound": self.reject.bound if self.reject else None}

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.asarray(self.scores, dtype=np.float64), np.asarray(self.labels, dtype=np.int64),
                np.asarray(self.weights, dtype=np.float64))

    def _look(self) -> None:
        self.look += 1
        self.looked_at = float(len(self.labels))
        a = look_alpha(self.alpha, self.look)
        s, y, w = self._arrays()
        accept = certify_weighted(s, (y == 0).astype(np.float64), w, candidates=self.accept_grid,
                                  target=self.target, alpha=a, sizes=np.asarray(self.accept_seen), look=self.look)
        reject = certify_weighted(-s, (y == 1).astype(np.float64), w, candidates=self.reject_grid,
                                  target=self.reject_target, alpha=a, sizes=np.asarray(self.reject_seen),
                                  side="reject", look=self.look)
        # a look only loosens: the certificate an earlier look issued stays covered by that look's budget
        # (and by the tightening checks); a look that certifies less leaves it in place
        self.accept, self.reject = _looser(self.accept, accept), _looser(self.reject, reject)

    def _tighten(self) -> list[str]:
        """Re-check each side's threshold on all evidence at the level it was issued at; move stricter if it fails.

        Only ever tightening, the check spends no budget, whatever its level.
        """
        s, y, w = self._arrays()
        out = []
        for side in ("accept", "reject"):
            cert: LiveCertificate | None = getattr(self, side)
            if cert is None or cert.threshold is None:
                continue
            x, wrong, grid, target, seen = ((s, y == 0, self.accept_grid, self.target, self.accept_seen)
                                            if side == "accept" else
                                            (-s, y == 1, self.reject_grid, self.reject_target, self.reject_seen))
            new = certify_weighted(x, wrong.astype(np.float64), w, candidates=grid, target=target,
                                   alpha=cert.alpha, sizes=np.asarray(seen), stricter_than=cert.threshold, side=side,
                                   look=cert.look)
            if new.threshold != cert.threshold:
                out.append(f"{side} tightened")
            setattr(self, side, new)
        return out

    def _drift(self) -> bool:
        """The latest batch's labels above a current threshold say, with confidence, the error is over target."""
        mine = np.asarray(self.batches) == self.batch
        if self.batch < 1 or not mine.any():
            return False
        a = look_alpha(self.alpha, self.batch)
        s, y, w = self._arrays()
        hit = False
        rt = self.reject_threshold
        for t, x, wrong, target in ((self.accept_threshold, s, y == 0, self.target),
                                    (None if rt is None else -rt, -s, y == 1, self.reject_target)):
            if t is None:
                continue
            block = mine & (x >= t)
            if block.any() and weighted_lower_bound(wrong[block], w[block], a) > target:
                hit = True
        if hit:  # facts before this batch no longer describe the stream: keep only this batch's labels
            self.scores = [v for v, m in zip(self.scores, mine, strict=True) if m]
            self.labels = [v for v, m in zip(self.labels, mine, strict=True) if m]
            self.weights = [v for v, m in zip(self.weights, mine, strict=True) if m]
            self.batches = [self.batch] * len(self.scores)
            self.accept_seen, self.reject_seen = list(self.batch_seen[0]), list(self.batch_seen[1])
            self.sizes_fixed = False
            self.drifts += 1
            self.accept = LiveCertificate("accept", self.target, False, None, None, a, self.look, 0, 0, 0, "drift")
            self.reject = LiveCertificate("reject", self.reject_target, False, None, None, a, self.look, 0, 0, 0,
                                          "drift")
            self.looked_at = 0.0  # the next update looks again, on the fresh labels alone
        return hit

    def block(self, side: str = "accept", threshold: float | None = None) -> dict[str, float]:
        """Labels, Kish effective size and weighted error rate of the block beyond ``threshold``."""
        s, y, w = self._arrays()
        x, wrong = (s, y == 0) if side == "accept" else (-s, y == 1)
        t = threshold if threshold is not None else (self.accept_grid or [np.inf])[0]
        grid, seen = (self.accept_grid, self.accept_seen) if side == "accept" else (self.reject_grid, self.reject_seen)
        w = poststratify(x, w, np.asarray(grid), np.asarray(seen))
        m = x >= t
        n_eff, k_eff = kish_effective(wrong[m].astype(np.float64), w[m])
        return {"labels": int(m.sum()), "effective": n_eff, "error_rate": k_eff / n_eff if n_eff else 0.0}

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["accept"] = asdict(self.accept) if self.accept else None
        out["reject"] = asdict(self.reject) if self.reject else None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditLedger:
        data = dict(data)
        for side in ("accept", "reject"):
            if data.get(side) is not None:
                data[side] = LiveCertificate(**data[side])
        return cls(**data)
