"""Calibration of fused scores and the figures an operating point is judged by.

Platt scaling (Platt 1999) maps a raw score to a probability with a one-feature logistic fit;
isotonic regression (Zadrozny & Elkan 2002) is the monotone, non-parametric alternative for
larger validation sets. ECE is the binned expected calibration error (Guo et al. 2017,
arXiv:1706.04599):

.. math::
    \\mathrm{ECE} = \\sum_b \\frac{|B_b|}{n} \\left| \\bar{y}_b - \\bar{p}_b \\right|
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

__all__ = ["Calibrator", "expected_calibration_error", "operating_point"]


@dataclass(slots=True)
class Calibrator:
    """Score → probability of truth, fitted on validation scores and labels.

    Args:
        method: ``"platt"`` (default, robust on few facts) or ``"isotonic"``.
    """

    method: str = "platt"
    _platt: LogisticRegression | None = None
    _iso: IsotonicRegression | None = None

    def fit(self, scores: Sequence[float], labels: Sequence[int]) -> Calibrator:
        s = np.asarray(scores, dtype=np.float64).reshape(-1, 1)  # (N, 1)
        y = np.asarray(labels, dtype=np.int64)
        if len(np.unique(y)) < 2:
            raise ValueError("calibration needs both true and false validation facts")
        if self.method == "platt":
            self._platt = LogisticRegression(C=1e6).fit(s, y)
        elif self.method == "isotonic":
            self._iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(s[:, 0], y)
        else:
            raise ValueError(f"unknown calibration method {self.method!r}")
        return self

    def predict(self, scores: Sequence[float]) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64).reshape(-1, 1)  # (N, 1)
        if self._platt is not None:
            return np.asarray(self._platt.predict_proba(s)[:, 1])
        if self._iso is not None:
            return np.asarray(self._iso.predict(s[:, 0]))
        raise RuntimeError("Calibrator.predict before fit")


def expected_calibration_error(probabilities: Sequence[float], labels: Sequence[int], bins: int = 15) -> float:
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if len(p) == 0:
        return 0.0
    idx = np.minimum((p * bins).astype(np.int64), bins - 1)
    ece = 0.0
    for b in range(bins):
        mask = idx == b
        if mask.any():
            ece += mask.mean() * abs(y[mask].mean() - p[mask].mean())
    return float(ece)


def operating_point(
    probabilities: Sequence[float], labels: Sequence[int], *, accept: float | None, reject: float | None
) -> dict[str, float]:
    """Automation (share decided without review) and error among auto-accepted facts."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    acc = p >= accept if accept is not None else np.zeros(len(p), dtype=bool)
    rej = p <= reject if reject is not None else np.zeros(len(p), dtype=bool)
    rej &= ~acc
    n = max(len(p), 1)
    return {
        "automation": float((acc | rej).sum() / n),
        "error": float((y[acc] == 0).mean()) if acc.any() else 0.0,
        "reject_error": float((y[rej] == 1).mean()) if rej.any() else 0.0,
        "accepted": int(acc.sum()),
    }
