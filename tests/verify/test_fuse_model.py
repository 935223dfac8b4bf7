"""Learned fusion on synthetic verifier scores whose Bayes posterior is known in closed form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from factloom.verify.base import Verdict, VerifierResult
from factloom.verify.certify import min_clean_accepts
from factloom.verify.fuse_model import LearnedFusion

MU_A, MU_B = 1.0, 1.5


def _sample(n: int, seed: int) -> tuple[list[list[VerifierResult]], np.ndarray, np.ndarray]:
    """Verifier a's logit ~ N(±MU_A, 1); b's ~ N(±MU_B, 1) but b abstains on 30 % of facts.

    With unit variances the true log-odds are 2·MU_A·s_a + 2·MU_B·s_b (the b term absent when it abstains).
    """
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    sign = 2 * y - 1
    s_a = rng.normal(MU_A * sign, 1.0)
    s_b = rng.normal(MU_B * sign, 1.0)
    b_on = rng.uniform(size=n) > 0.3
    rows = []
    for i in range(n):
        pa = float(1 / (1 + np.exp(-s_a[i])))
        pb = float(1 / (1 + np.exp(-s_b[i]))) if b_on[i] else None
        rows.append([VerifierResult("a", pa, "a says", details={"extra": float(s_a[i])}),
                     VerifierResult("b", pb, "b says" if b_on[i] else "b abstains")])
    bayes = 1 / (1 + np.exp(-(2 * MU_A * s_a + 2 * MU_B * s_b * b_on)))
    return rows, y, bayes


def test_logistic_fusion_recovers_the_bayes_posterior() -> None:
    rows, y, _ = _sample(6000, seed=1)
    fusion = LearnedFusion(["a", "b"], method="logistic", calibration="platt", target=0.01).fit(rows, y)
    test_rows, test_y, bayes = _sample(4000, seed=2)
    p = fusion.predict_proba(test_rows)
    assert np.abs(p - bayes).mean() < 0.02
    acc = ((p >= 0.5) == test_y).mean()
    assert acc >= ((bayes >= 0.5) == test_y).mean() - 0.01
    # fusing beats the best single verifier
    pa = np.array([r[0].probability for r in test_rows])
    assert acc > ((pa >= 0.5) == test_y).mean() + 0.03


def test_gbdt_fusion_is_calibrated_and_certified_error_holds_on_new_data() -> None:
    rows, y, _ = _sample(8000, seed=3)
    fusion = LearnedFusion(["a", "b"], details={"a": ["extra"]}, target=0.01).fit(rows, y)
    assert fusion.certificate is not None and fusion.certificate.certified
    assert fusion.accept is not None and fusion.reject is not None and fusion.reject < fusion.accept
    assert fusion.certificate.accepted >= min_clean_accepts(0.01)
    test_rows, test_y, bayes = _sample(8000, seed=4)
    fused = fusion.fuse_many(test_rows)
    p = np.array([f.probability for f in fused])
    assert np.abs(p - bayes).mean() < 0.05
    accepted = np.array([f.verdict is Verdict.accept for f in fused])
    rejected = np.array([f.verdict is Verdict.reject for f in fused])
    assert accepted.sum() > 500 and rejected.sum() > 500
    assert (test_y[accepted] == 0).mean() <= 0.01 + 0.005  # certified 1 %, small sampling slack
    assert (test_y[rejected] == 1).mean() <= 0.01 + 0.005
    assert all(f.verdict is Verdict.review for f, a, r in zip(fused, accepted, rejected, strict=True) if not (a or r))


def test_uncertifiable_target_accepts_nothing_and_says_so() -> None:
    rows, y, _ = _sample(1500, seed=5)
    fusion = LearnedFusion(["a", "b"]).fit(rows, y)  # default 0.0007 needs 4279 clean accepts
    assert fusion.certificate is not None and not fusion.certificate.certified
    assert fusion.accept is None and "cannot certify" in fusion.certificate.reason
    assert all(f.verdict is not Verdict.accept for f in fusion.fuse_many(rows))


def test_all_abstaining_goes_to_review_and_save_load_round_trips(tmp_path: Path) -> None:
    rows, y, _ = _sample(3000, seed=6)
    fusion = LearnedFusion(["a", "b"], target=0.05).fit(rows, y)
    silent = fusion.fuse([VerifierResult("a", None, "no"), VerifierResult("b", None, "no")])
    assert silent.verdict is Verdict.review and silent.probability is None
    again = LearnedFusion.load(fusion.save(tmp_path / "fusion"))
    assert again.version == fusion.version and again.version.startswith("fusion-gbdt-")
    assert again.accept == fusion.accept and again.reject == fusion.reject
    assert again.certificate == fusion.certificate
    assert np.array_equal(again.predict_proba(rows[:50]), fusion.predict_proba(rows[:50]))
    meta = (tmp_path / "fusion" / "fusion.json").read_text()
    assert '"certified": true' in meta and '"thresholds"' in meta
    one = again.fuse(rows[0])
    assert one.verdict in (Verdict.accept, Verdict.reject, Verdict.review) and one.reason


def test_bad_input_is_refused(tmp_path: Path) -> None:
    rows, y, _ = _sample(200, seed=7)
    with pytest.raises(ValueError, match="unknown fusion method"):
        LearnedFusion(["a"], method="magic")
    with pytest.raises(ValueError, match="labels"):
        LearnedFusion(["a", "b"]).fit(rows, y[:10])
    with pytest.raises(ValueError, match="both true and false"):
        LearnedFusion(["a", "b"]).fit(rows, np.ones(len(rows), dtype=int))
    with pytest.raises(RuntimeError):
        LearnedFusion(["a"]).predict_proba(rows)
    with pytest.raises(FileNotFoundError):
        LearnedFusion.load(tmp_path)


def test_cross_fitted_fusion_certifies_out_of_fold_and_scores_new_facts_by_their_fold(tmp_path: Path) -> None:
    rows, y, _ = _sample(5000, seed=8)
    fusion = LearnedFusion(["a", "b"], details={"a": ["extra"]}, target=0.01, folds=5).fit(rows, y)
    assert isinstance(fusion.model, list) and len(fusion.model) == 5
    assert fusion.metrics["calibration_facts"] == 5000 and "cross-fitted" in fusion.metrics["certificate_basis"]
    assert fusion.certificate is not None and fusion.certificate.certified
    test_rows, test_y, bayes = _sample(8000, seed=9)
    fused = fusion.fuse_many(test_rows)
    p = np.array([f.probability for f in fused])
    assert np.abs(p - bayes).mean() < 0.05
    accepted = np.array([f.verdict is Verdict.accept for f in fused])
    assert accepted.sum() > 1000 and (test_y[accepted] == 0).mean() <= 0.015
    again = LearnedFusion.load(fusion.save(tmp_path / "cf"))
    assert again.folds == 5 and np.array_equal(again.predict_proba(test_rows[:100]), p[:100])
    with pytest.raises(ValueError, match="folds"):
        LearnedFusion(["a"], folds=1)


def test_grouped_folds_and_refit_deployment(tmp_path: Path) -> None:
    rows, y, _ = _sample(3000, seed=10)
    groups = [f"g{i % 97}" for i in range(len(rows))]
    fusion = LearnedFusion(["a", "b"], target=0.05, folds=4, deploy="refit").fit(rows, y, groups=groups)
    basis = fusion.metrics["certificate_basis"]
    assert "grouped" in basis and "refitted" in basis and fusion.refit is not None
    test_rows, test_y, _ = _sample(3000, seed=11)
    p = fusion.predict_proba(test_rows)
    assert ((p >= 0.5) == test_y).mean() > 0.85
    again = LearnedFusion.load(fusion.save(tmp_path / "refit"))
    assert again.deploy == "refit" and np.array_equal(again.predict_proba(test_rows[:50]), p[:50])
    with pytest.raises(ValueError, match="groups"):
        LearnedFusion(["a", "b"], folds=4).fit(rows, y, groups=groups[:10])
