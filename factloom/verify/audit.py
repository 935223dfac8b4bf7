"""Live certification: a blind audit of automatic verdicts and thresholds re-certified as labels arrive.

The fusion's accept threshold is certified once on validation facts (:mod:`factloom.verify.certify`).
After deployment the facts drift, so the promise *error among auto-accepted facts <= target* has to be
re-checked on the facts the fusion actually decides. Two parts:

**Audit sampling.** :class:`AuditSampler` sends a share of the automatically decided facts (accepted
and rejected) to a blind audit. Facts are stratified by fused probability; stratum ``h`` is audited
with inclusion probability :math:`\\pi_h`, allocated like Neyman (1934) in proportion to the standard
deviation of an error there, :math:`\\sqrt{r_h(1-r_h)}` with :math:`r_h = \\min(p_h, 1-p_h)` at the
stratum's middle, so facts close to the thresholds — where errors live — are audited more often than
near-certain ones. Selection is deterministic: fact ``i`` is audited iff ``u(seed, id_i) < pi_h`` with
``u`` a hash mapped to [0, 1), so a worker can recompute who was audited. An audit label never changes
a fact; it only enters the evidence.

**Re-certification.** :class:`AuditLedger` holds the evidence — validation facts (weight 1), facts a
reviewer decided because they fell between the thresholds (weight 1: every one of them is labelled)
and audited facts (weight :math:`1/\\pi_h`, Horvitz & Thompson 1952) — and re-runs the fixed-sequence
test of ``certify.py`` over a grid of candidate thresholds fixed at the start from validation scores
alone. For a block of weighted labels with error indicators :math:`z_i` the bound is Clopper–Pearson
on the Kish effective sample (the Korn & Graubard 1998 form for weighted survey proportions):

.. math::
    \\hat p = \\frac{\\sum w_i z_i}{\\sum w_i}, \\quad
    n_\\mathrm{eff} = \\frac{(\\sum w_i)^2}{\\sum w_i^2}, \\quad
    \\mathrm{UCB} = B^{-1}\\bigl(1 - \\alpha_k;\\; n_\\mathrm{eff}\\hat p + 1,\\; n_\\mathrm{eff}(1-\\hat p)\\bigr)

which is exact Clopper–Pearson when the weights in the block are equal and the usual large-survey
approximation otherwise. The weights are post-stratified (:func:`poststratify`): between two
consecutive candidate thresholds every labelled fact counts alike — validation, review and audit
labels are exchangeable given the score — and the stratum as a whole counts for its share of the
validation facts (after a drift, of the facts seen since). Fixed shares keep the bound from moving
with the random counts of unlabelled stream facts in small strata, which, at a threshold certified
right at the target, would tighten it on noise alone.

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

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.stats import beta

from factloom.verify.certify import min_clean_accepts

__all__ = [
    "AuditSampler", "AuditLedger", "LiveCertificate", "DEFAULT_EDGES", "look_alpha", "weighted_upper_bound",
    "weighted_lower_bound", "certify_weighted", "poststratify", "labels_to_certify", "uniform_hash",
]

# fused-probability strata: fine near both ends, where the automatic verdicts and their rare errors are
DEFAULT_EDGES = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 1.0)
_FLOOR = 0.25  # no stratum is audited at less than a quarter of the share: bounds the weights at 4/share


def look_alpha(alpha: float, k: int) -> float:
    """The budget of look ``k >= 1``: ``alpha / (k (k + 1))``, summing to ``alpha`` over all looks."""
    if k < 1:
        raise ValueError(f"looks count from 1, got {k}")
    return alpha / (k * (k + 1))


def uniform_hash(seed: int | str, fact_id: str) -> float:
    """A uniform number in [0, 1) fixed by ``seed`` and ``fact_id`` (blake2b, 64 bits)."""
    digest = hashlib.blake2b(f"{seed}:{fact_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _effective(wrong: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """Kish effective sample size and effective error count of a weighted block."""
    sw, sw2 = float(weights.sum()), float((weights ** 2).sum())
    if sw <= 0:
        return 0.0, 0.0
    n_eff = sw * sw / sw2
    return n_eff, n_eff * float((weights * wrong).sum()) / sw


def _cp_upper(k: float, n: float, alpha: float) -> float:
    if n <= 0 or k >= n:
        return 1.0
    return float(beta.ppf(1.0 - alpha, k + 1.0, n - k))


def _cp_lower(k: float, n: float, alpha: float) -> float:
    if n <= 0 or k <= 0:
        return 0.0
    return float(beta.ppf(alpha, k, n - k + 1.0))


def weighted_upper_bound(wrong: Sequence[int] | np.ndarray, weights: Sequence[float] | np.ndarray,
                         alpha: float) -> float:
    """``1 - alpha`` upper bound on the weighted error rate (Clopper–Pearson on the Kish sample); 1.0 if empty."""
    n, k = _effective(np.asarray(wrong, dtype=np.float64), np.asarray(weights, dtype=np.float64))
    return _cp_upper(k, n, alpha)


def weighted_lower_bound(wrong: Sequence[int] | np.ndarray, weights: Sequence[float] | np.ndarray,
                         alpha: float) -> float:
    """``1 - alpha`` lower bound on the weighted error rate; 0.0 if empty or error-free."""
    n, k = _effective(np.asarray(wrong, dtype=np.float64), np.asarray(weights, dtype=np.float64))
    return _cp_lower(k, n, alpha)


@dataclass(frozen=True, slots=True)
class AuditSampler:
    """Which automatically decided facts go to the blind audit.

    Args:
        edges: stratum boundaries on the fused probability, from 0 to 1.
        rates: inclusion probability per stratum (``len(edges) - 1`` values in (0, 1]).
        seed: salts the hash, so two kbs (or two runs) audit different facts.
    """

    edges: tuple[float, ...] = DEFAULT_EDGES
    rates: tuple[float, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if len(self.rates) != len(self.edges) - 1:
            raise ValueError(f"{len(self.edges) - 1} strata need as many rates, got {len(self.rates)}")
        if any(not 0.0 < r <= 1.0 for r in self.rates):
            raise ValueError("inclusion rates must be in (0, 1]")

    @classmethod
    def allocate(cls, probabilities: Sequence[float] | np.ndarray, *, share: float,
                 edges: Sequence[float] = DEFAULT_EDGES, seed: int = 0) -> AuditSampler:
        """Neyman-like allocation so that ``share`` of facts distributed like ``probabilities`` is audited.

        ``probabilities`` are fused probabilities of facts that would be decided automatically (for
        instance the validation facts beyond the current thresholds); with none, every stratum gets
        ``share``. No stratum gets less than a quarter of ``share``, which bounds the weights.
        """
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        e = np.asarray(edges, dtype=np.float64)
        mid = (e[:-1] + e[1:]) / 2
        risk = np.minimum(mid, 1 - mid)
        need = np.sqrt(risk * (1 - risk))
        p = np.asarray(probabilities, dtype=np.float64)
        counts = np.bincount(_strata(p, e), minlength=len(mid)).astype(np.float64) if len(p) else np.zeros(len(mid))
        if counts.sum() == 0:
            return cls(tuple(float(x) for x in e), tuple([share] * len(mid)), seed)
        # find c with sum_h N_h clip(c * need_h, floor, 1) = share * N by bisection (monotone in c)
        lo, hi, total = 0.0, 1.0 / max(float(need[need > 0].min()), 1e-12), share * counts.sum()

        def spent(c: float) -> float:
            return float((counts * np.clip(c * need, _FLOOR * share, 1.0)).sum())

        if spent(lo) >= total:  # the floor alone spends the share (a single, easy stratum)
            rates = np.clip(np.full(len(mid), share), 0, 1)
        else:
            for _ in range(60):
                c = (lo + hi) / 2
                lo, hi = (c, hi) if spent(c) < total else (lo, c)
            rates = np.clip(hi * need, _FLOOR * share, 1.0)
        return cls(tuple(float(x) for x in e), tuple(float(r) for r in rates), seed)

    def strata(self, probabilities: Sequence[float] | np.ndarray) -> np.ndarray:
        return _strata(np.asarray(probabilities, dtype=np.float64), np.asarray(self.edges))

    def inclusion(self, probabilities: Sequence[float] | np.ndarray) -> np.ndarray:
        """The audit probability of each fact, from its fused probability."""
        return np.asarray(np.asarray(self.rates)[self.strata(probabilities)])

    def select(self, fact_ids: Sequence[str], probabilities: Sequence[float] | np.ndarray) -> np.ndarray:
        """Boolean mask: which of these automatically decided facts are audited (deterministic)."""
        if len(fact_ids) != len(probabilities):
            raise ValueError(f"{len(fact_ids)} ids but {len(probabilities)} probabilities")
        u = np.array([uniform_hash(self.seed, f) for f in fact_ids])
        return u < self.inclusion(probabilities)

    def as_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "rates": list(self.rates), "seed": self.seed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditSampler:
        return cls(tuple(data["edges"]), tuple(data["rates"]), int(data["seed"]))


def _strata(p: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.asarray(np.clip(np.searchsorted(edges, np.nan_to_num(p, nan=0.5), side="right") - 1, 0, len(edges) - 2))


@dataclass(frozen=True, slots=True)
class LiveCertificate:
    """One side's threshold after a check, with what the evidence says about it.

    ``threshold`` is on the scores the ledger holds (higher = more likely true for both sides; the
    reject side accepts scores ``<= threshold``); ``None`` when nothing is certified.
    """

    side: str
    target: float
    certified: bool
    threshold: float | None
    bound: float | None  # the upper bound on the error at ``threshold``, at level ``alpha``
    alpha: float
    look: int
    labels: int  # labelled facts in the block
    effective: float  # their Kish effective size
    errors: float  # weighted error estimate times the effective size
    reason: str


def _block_sums(s: np.ndarray, wrong: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
    order = np.argsort(-s, kind="stable")
    return s[order], np.cumsum(w[order]), np.cumsum(w[order] ** 2), np.cumsum((w * wrong)[order])


def stratum_of(scores: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Index of the first (strictest-first) candidate at or below each score; ``len(candidates)`` below all."""
    return np.searchsorted(-np.asarray(candidates, dtype=np.float64), -np.asarray(scores, dtype=np.float64),
                           side="left")


def poststratify(scores: np.ndarray, weights: np.ndarray, candidates: np.ndarray,
                 sizes: np.ndarray | None = None) -> np.ndarray:
    """Equal weights within each stratum between consecutive candidates, summing to the stratum's size.

    ``sizes`` are the facts seen per stratum (``len(candidates) + 1`` counts); without them the
    Horvitz–Thompson sum of the inverse inclusion probabilities estimates them. A stratum's labelled
    facts — validation, review or audit — are exchangeable given the score, so each carries an equal
    share (post-stratification). Without it one audited fact of weight 50 beside hundreds of
    validation facts of weight 1 would shrink the Kish size of the whole block to a few dozen.
    """
    if not len(scores):
        return weights
    idx = stratum_of(scores, candidates)
    size = (np.asarray(sizes, dtype=np.float64) if sizes is not None
            else np.bincount(idx, weights=weights, minlength=len(candidates) + 1))
    count = np.bincount(idx, minlength=len(candidates) + 1)
    return np.asarray(np.maximum(size[idx], count[idx]) / count[idx])


def certify_weighted(scores: np.ndarray, wrong: np.ndarray, weights: np.ndarray, *, candidates: Sequence[float],
                     target: float, alpha: float, sizes: np.ndarray | None = None,
                     stricter_than: float | None = None, side: str = "accept", look: int = 1) -> LiveCertificate:
    """Fixed-sequence test over ``candidates`` (strictest first): the loosest threshold that passes.

    A candidate's block is every fact with score ``>= candidate``. Candidates whose block is too
    small to pass even error-free are skipped (a fact of the weights, not the labels); the first
    failure after that ends the scan. Weights are post-stratified between candidates (``sizes``: the
    stratum sizes, see :func:`poststratify`). ``stricter_than`` restricts the scan to candidates at
    or above it (a tightening check).
    """
    c = np.asarray(candidates, dtype=np.float64)
    if stricter_than is not None:
        c = c[c >= stricter_than]
    s_sorted, cw, cw2, cwz = _block_sums(scores, wrong, poststratify(scores, weights, np.asarray(candidates), sizes))
    # every candidate's block at once: n labelled facts with score >= t, their Kish size and errors
    n = np.searchsorted(-s_sorted, -c, side="right")
    last = np.maximum(n - 1, 0)
    sw, sw2, swz = (np.where(n > 0, x[last], 0.0) if len(x) else np.zeros(len(c)) for x in (cw, cw2, cwz))
    n_eff = np.divide(sw * sw, sw2, out=np.zeros(len(c)), where=sw2 > 0)
    k_eff = np.divide(n_eff * swz, sw, out=np.zeros(len(c)), where=sw > 0)
    ucb = np.ones(len(c))
    ok = (n_eff > 0) & (k_eff < n_eff)
    ucb[ok] = beta.ppf(1.0 - alpha, k_eff[ok] + 1.0, n_eff[ok] - k_eff[ok])
    testable = n_eff >= np.log(alpha) / np.log1p(-target)  # error-free, the block would pass
    best: LiveCertificate | None = None
    first_fail = ""
    for i, t in enumerate(c):
        if ucb[i] > target:
            if testable[i]:  # could have passed: a real failure ends the scan
                first_fail = (f"{k_eff[i]:.1f} weighted errors in {n_eff[i]:.0f} effective labels at score >= "
                              f"{t:.4f}: UCB {ucb[i]:.5f} > {target:g}")
                break
            continue
        best = LiveCertificate(side, target, True, float(t), float(ucb[i]), alpha, look, int(n[i]),
                               float(n_eff[i]), float(k_eff[i]),
                               f"{k_eff[i]:.1f} weighted errors in {n_eff[i]:.0f} effective labels ({n[i]} labelled) "
                               f"at score >= {t:.4f}; UCB {ucb[i]:.5f} <= {target:g} at alpha {alpha:.2e}")
    if best is not None:
        return best
    why = first_fail or f"no candidate has enough labels to certify {target:g} at alpha {alpha:.2e}"
    return LiveCertificate(side, target, False, None, None, alpha, look, 0, 0.0, 0.0, f"cannot certify: {why}")


def labels_to_certify(wrong_rate: float, have: float, *, target: float, alpha: float) -> float | None:
    """Effective labels still missing before a block with error rate ``wrong_rate`` certifies ``target``.

    ``None`` when the rate is at or above the target (no number of labels would do).
    """
    if wrong_rate >= target:
        return None
    lo, hi = 1.0, 1e3
    while _cp_upper(wrong_rate * hi, hi, alpha) > target:
        hi *= 2
        if hi > 1e12:
            return None
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _cp_upper(wrong_rate * mid, mid, alpha) > target else (lo, mid)
    return max(0.0, hi - have)


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
        n_eff, k_eff = _effective(wrong[m].astype(np.float64), w[m])
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
