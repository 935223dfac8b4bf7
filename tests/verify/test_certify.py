"""Certified accept thresholds on synthetic scores with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from factloom.verify.certify import certify_accept_threshold, clopper_pearson_upper, min_clean_accepts


def test_clopper_pearson_known_values() -> None:
    # zero errors in n: the bound is 1 - alpha**(1/n) ("rule of three" ≈ 3/n)
    assert clopper_pearson_upper(0, 100) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert clopper_pearson_upper(0, 0) == 1.0
    assert clopper_pearson_upper(5, 5) == 1.0
    assert clopper_pearson_upper(1, 100) > clopper_pearson_upper(0, 100)
    assert min_clean_accepts(0.0007) == 4279


def test_clean_top_block_is_certified_and_noise_is_not_accepted() -> None:
    # 400 true facts at high scores, then a mixed band: only the clean block can pass 1 %
    p = np.concatenate([np.linspace(0.99, 0.9, 400), np.linspace(0.89, 0.5, 200)])
    y = np.concatenate([np.ones(400, dtype=int), np.tile([1, 0], 100)])
    cert = certify_accept_threshold(p, y, target=0.01)
    assert cert.certified and cert.errors <= 1
    assert cert.threshold is not None and cert.threshold >= 0.88
    assert cert.accepted >= min_clean_accepts(0.01)
    assert cert.upper_bound <= 0.01


def test_too_few_facts_cannot_certify() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(size=1000)
    y = np.ones(1000, dtype=int)  # even with no errors, 1000 facts cannot certify 0.7 per mille
    cert = certify_accept_threshold(p, y, target=0.0007)
    assert not cert.certified and cert.threshold is None and cert.accepted == 0
    assert "cannot certify" in cert.reason


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        certify_accept_threshold([0.5], [1, 0], target=0.01)
    with pytest.raises(ValueError):
        certify_accept_threshold([0.5], [1], target=0.0)
