"""Verifier results as feature rows: the input of the learned fusion (:mod:`factloom.verify.fuse_model`).

Each claim's results become one row: per configured verifier the logit of its probability and an
abstain indicator, then chosen numeric ``details`` (for example the plausibility scorer's filtered
ranks). An abstaining verifier, and a detail that is missing or not a number, leave NaN: gradient
boosting takes it as a missing value; a linear model needs it filled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from factloom.verify.base import VerifierResult

__all__ = ["Rows", "feature_names", "featurize"]

Rows = Sequence[Sequence[VerifierResult]]
_EPS = 1e-4  # probabilities are clipped to [eps, 1 - eps] before the logit


def feature_names(verifiers: Sequence[str], details: Mapping[str, Sequence[str]]) -> list[str]:
    """``verifier:logit`` and ``verifier:abstain`` per verifier, then ``verifier:detail`` per detail."""
    names = [f"{v}:{k}" for v in verifiers for k in ("logit", "abstain")]
    return names + [f"{v}:{k}" for v, keys in details.items() for k in keys]


def featurize(rows: Rows, verifiers: Sequence[str], details: Mapping[str, Sequence[str]]) -> np.ndarray:
    """(N, F) features in the order of :func:`feature_names`; NaN where a value is missing."""
    out = np.full((len(rows), len(feature_names(verifiers, details))), np.nan)
    for i, results in enumerate(rows):
        by = {r.verifier: r for r in results}
        for j, v in enumerate(verifiers):
            r = by.get(v)
            if r is None or r.probability is None:
                out[i, 2 * j + 1] = 1.0
                continue
            p = min(max(float(r.probability), _EPS), 1 - _EPS)
            out[i, 2 * j], out[i, 2 * j + 1] = np.log(p / (1 - p)), 0.0
        col = 2 * len(verifiers)
        for v, keys in details.items():
            r = by.get(v)
            for k in keys:
                value = r.details.get(k) if r is not None and r.probability is not None else None
                if isinstance(value, int | float):
                    out[i, col] = float(value)
                col += 1
    return out
