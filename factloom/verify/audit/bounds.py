"""Weighted error bounds and the fixed-sequence test the live certificate runs.

For a block of weighted labels with error indicators :math:`z_i` (validation and review labels weight
1, audit labels :math:`1/\\pi_h`, Horvitz & Thompson 1952) the bound is Clopper–Pearson on the Kish
effective sample (the Korn & Graubard 1998 form for weighted survey proportions):

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

:func:`certify_weighted` runs the fixed-sequence test of :mod:`factloom.verify.certify` with that bound
over a grid of candidate thresholds; look ``k`` spends :func:`look_alpha` of the error budget (the
anytime argument is in :mod:`factloom.verify.audit.ledger`). Everything here is numpy / scipy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

__all__ = [
    "LiveCertificate", "look_alpha", "kish_effective", "weighted_upper_bound", "weighted_lower_bound",
    "stratum_of", "poststratify", "certify_weighted", "labels_to_certify",
]


def look_alpha(alpha: float, k: int) -> float:
    """The budget of look ``k >= 1``: ``alpha / (k (k + 1))``, summing to ``alpha`` over all looks."""
    if k < 1:
        raise ValueError(f"looks count from 1, got {k}")
    return alpha / (k * (k + 1))


def kish_effective(wrong: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
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
    n, k = kish_effective(np.asarray(wrong, dtype=np.float64), np.asarray(weights, dtype=np.float64))
    return _cp_upper(k, n, alpha)


def weighted_lower_bound(wrong: Sequence[int] | np.ndarray, weights: Sequence[float] | np.ndarray,
                         alpha: float) -> float:
    """``1 - alpha`` lower bound on the weighted error rate; 0.0 if empty or error-free."""
    n, k = kish_effective(np.asarray(wrong, dtype=np.float64), np.asarray(weights, dtype=np.float64))
    return _cp_lower(k, n, alpha)


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
