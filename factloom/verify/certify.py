"""Accept thresholds with a finite-sample guarantee on the error among auto-accepted facts.

For a candidate threshold ``t`` the validation facts with fused probability ``>= t`` are the
auto-accepted ones; ``k`` of those ``n`` are false. The one-sided Clopper–Pearson upper bound

.. math::
    \\mathrm{UCB}_{1-\\alpha}(k, n) = B^{-1}(1 - \\alpha;\\; k + 1,\\; n - k)

(``B`` the beta distribution, Clopper & Pearson 1934) bounds the true error rate with probability
``1 - alpha``. Scanning thresholds from the strictest down and stopping at the first whose bound
exceeds the target is fixed-sequence testing, so the family-wise guarantee holds without a
multiplicity correction (learn-then-test, Angelopoulos et al. 2021, arXiv:2110.01052).
When no threshold passes — too few validation facts, or too many errors — the result says
``certified=False`` and accepts nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

__all__ = ["Certificate", "clopper_pearson_upper", "certify_accept_threshold", "min_clean_accepts"]


def clopper_pearson_upper(errors: int, n: int, alpha: float = 0.05) -> float:
    """One-sided ``1 - alpha`` upper confidence bound on a binomial rate; 1.0 when ``n == 0``."""
    if n <= 0:
        return 1.0
    if errors >= n:
        return 1.0
    return float(beta.ppf(1.0 - alpha, errors + 1, n - errors))


def min_clean_accepts(target: float, alpha: float = 0.05) -> int:
    """Fewest error-free accepted validation facts that can certify ``target`` (≈ 3/target)."""
    # with k = 0 the bound is 1 - alpha**(1/n), so n >= log(alpha) / log(1 - target)
    return int(np.ceil(np.log(alpha) / np.log1p(-target)))


@dataclass(frozen=True, slots=True)
class Certificate:
    """The chosen accept threshold and what validation says about it.

    ``threshold`` is ``None`` when nothing can be certified: then no fact is auto-accepted.
    """

    target: float
    alpha: float
    certified: bool
    threshold: float | None
    accepted: int
    errors: int
    upper_bound: float
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.target, "alpha": self.alpha, "certified": self.certified,
            "threshold": self.threshold, "accepted": self.accepted, "errors": self.errors,
            "upper_bound": self.upper_bound, "reason": self.reason,
        }


def certify_accept_threshold(
    probabilities: Sequence[float], labels: Sequence[int], *, target: float, alpha: float = 0.05
) -> Certificate:
    """The lowest threshold (most automation) whose error UCB stays within ``target``.

    Args:
        probabilities: fused probability of truth per validation fact.
        labels: 1 for a true fact, 0 for a false one.
        target: allowed error rate among auto-accepted facts, e.g. ``0.0007``.
        alpha: one minus the confidence level (default 0.05, a 95 % bound).
    """
    if not 0.0 < target < 1.0:
        raise ValueError(f"target must be in (0, 1), got {target}")
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError("probabilities and labels must be 1-D and of equal length")
    need = min_clean_accepts(target, alpha)
    order = np.argsort(-p, kind="stable")  # strictest threshold first
    p_sorted, wrong = p[order], (y[order] == 0).astype(np.int64)
    errors_cum = np.cumsum(wrong)
    best: tuple[float, int, int, float] | None = None
    i = 0
    n_total = len(p_sorted)
    while i < n_total:
        # ties share one threshold: accept the whole block of equal probabilities or none of it
        j = i
        while j + 1 < n_total and p_sorted[j + 1] == p_sorted[i]:
            j += 1
        n, k = j + 1, int(errors_cum[j])
        ucb = clopper_pearson_upper(k, n, alpha)
        if ucb > target:
            # below ``need`` accepted facts no outcome can pass, so the test sequence starts at the
            # first threshold with enough facts; the first failure after that ends the scan
            if n >= need:
                break
        else:
            best = (float(p_sorted[i]), n, k, ucb)
        i = j + 1
    if best is None:
        why = (f"cannot certify {target:g}: needs at least {need} error-free accepted validation "
               f"facts at {1 - alpha:.0%} confidence; validation has {n_total} facts")
        return Certificate(target, alpha, False, None, 0, 0, 1.0, why)
    t, n, k, ucb = best
    return Certificate(target, alpha, True, t, n, k, ucb,
                       f"{k}/{n} errors at p >= {t:.4f}; {1 - alpha:.0%} UCB {ucb:.5f} <= {target:g}")
