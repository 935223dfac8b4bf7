"""Calibration and operating points on synthetic scores with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from factloom.model.calibrate import Calibrator, expected_calibration_error, operating_point


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_calibration_recovers_a_known_logistic(method: str) -> None:
    rng = np.random.default_rng(1)
    s = rng.normal(scale=3.0, size=4000)
    y = (rng.uniform(size=s.size) < 1 / (1 + np.exp(-s))).astype(int)  # true p = sigmoid(s)
    raw = 1 / (1 + np.exp(-3 * s))  # over-confident raw probabilities
    cal = Calibrator(method).fit(s, y)
    p = cal.predict(s)
    assert expected_calibration_error(p, y) < 0.03
    assert expected_calibration_error(p, y) < expected_calibration_error(raw, y)


def test_operating_point_counts() -> None:
    p = [0.99, 0.95, 0.5, 0.05, 0.01]
    y = [1, 0, 1, 0, 0]
    op = operating_point(p, y, accept=0.9, reject=0.1)
    assert op == {"automation": 0.8, "error": 0.5, "reject_error": 0.0, "accepted": 2}


def test_calibration_needs_both_labels() -> None:
    with pytest.raises(ValueError):
        Calibrator().fit([0.1, 0.2], [1, 1])
