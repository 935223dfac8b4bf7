"""Live certification (factloom/verify/audit/): stratified audit sampling and the anytime-valid certificate.

Pure tests on synthetic streams: no services. Scores are uniform on [0, 1] and a fact with score ``s``
is false with probability ``q(s)``, so the true error among facts accepted at ``t`` is known exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

from factloom.verify.audit import (
    AuditLedger,
    AuditSampler,
    labels_to_certify,
    look_alpha,
    weighted_upper_bound,
)

Rate = Callable[[np.ndarray], np.ndarray]


def quadratic(s: np.ndarray) -> np.ndarray:
    """P(false | s) = 0.05 (1 - s)^2: the error among facts with s >= t is 0.05 (1 - t)^2 / 3."""
    return 0.05 * (1 - s) ** 2


def true_error(t: float) -> float:
    return 0.05 * (1 - t) ** 2 / 3


def draw(rng: np.random.Generator, n: int, rate: Rate) -> tuple[np.ndarray, np.ndarray]:
    s = rng.random(n)
    return s, (rng.random(n) >= rate(s)).astype(np.int64)


def run_batch(ledger: AuditLedger, rng: np.random.Generator, n: int, rate: Rate, share: float,
              seed: int, batch: int) -> dict[str, float]:
    """One batch through the ledger: decide, audit a stratified share of the automatic verdicts, label, update."""
    s, y = draw(rng, n, rate)
    acc = s >= ledger.accept_threshold if ledger.accept_threshold is not None else np.zeros(n, dtype=bool)
    rej = (s <= ledger.reject_threshold) & ~acc if ledger.reject_threshold is not None else np.zeros(n, dtype=bool)
    sampler = AuditSampler.allocate(s[acc | rej], share=share, seed=seed)
    decided = np.flatnonzero(acc | rej)
    audited = np.zeros(n, dtype=bool)
    audited[decided] = sampler.select([f"{seed}-{batch}-{i}" for i in decided], s[decided])
    labelled = audited | ~(acc | rej)
    ledger.add(s[labelled], y[labelled], np.where(audited, 1.0 / sampler.inclusion(s), 1.0)[labelled], seen=s)
    ledger.update()
    return {"accept_share": float(acc.mean()), "error": float((y[acc] == 0).mean()) if acc.any() else 0.0}


def test_look_budget_sums_to_alpha() -> None:
    assert sum(look_alpha(0.05, k) for k in range(1, 100_000)) == pytest.approx(0.05, rel=1e-4)
    with pytest.raises(ValueError):
        look_alpha(0.05, 0)


def test_sampling_is_stratified_and_deterministic() -> None:
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.uniform(0.9, 1.0, 60_000), rng.uniform(0.0, 0.1, 40_000)])
    sampler = AuditSampler.allocate(p, share=0.02, seed=7)
    ids = [f"fact-{i}" for i in range(len(p))]
    chosen = sampler.select(ids, p)
    # the overall share is the configured one, and each stratum's realised share is its inclusion rate
    assert chosen.mean() == pytest.approx(0.02, abs=0.002)
    strata = sampler.strata(p)
    for h in np.unique(strata):
        m = strata == h
        rate = sampler.rates[h]
        assert abs(chosen[m].mean() - rate) <= 4 * np.sqrt(rate * (1 - rate) / m.sum()) + 1e-9
    # strata nearer the thresholds' doubt are audited more than near-certain ones
    assert sampler.inclusion([0.92])[0] > sampler.inclusion([0.999])[0]
    # deterministic in (seed, fact id); another seed audits other facts
    assert np.array_equal(chosen, AuditSampler.from_dict(json.loads(json.dumps(sampler.as_dict()))).select(ids, p))
    other = AuditSampler.allocate(p, share=0.02, seed=8).select(ids, p)
    assert (chosen != other).any()


def test_weighted_bound_covers_at_its_level() -> None:
    """Stratified audit of a known error rate: the 95 % bound falls below the truth in <= 5 % of runs."""
    rng = np.random.default_rng(1)
    misses = 0
    runs = 2000
    for _ in range(runs):
        # two strata of accepted facts: a risky one (error 3 %, audited at 10 %) and a safe one (0.2 %, at 1 %)
        n_risky, n_safe = rng.binomial(2000, 0.1), rng.binomial(20_000, 0.01)
        wrong = np.concatenate([rng.random(n_risky) < 0.03, rng.random(n_safe) < 0.002]).astype(float)
        w = np.concatenate([np.full(n_risky, 10.0), np.full(n_safe, 100.0)])
        truth = (2000 * 0.03 + 20_000 * 0.002) / 22_000
        misses += weighted_upper_bound(wrong, w, 0.05) < truth
    assert misses / runs <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / runs)


def test_certificate_holds_at_every_look_over_many_streams() -> None:
    """Family-wise over thresholds and looks: a certified threshold's true error exceeds the target in <= 5 %."""
    target, alpha, seeds = 0.01, 0.05, 120
    bad = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        ledger = AuditLedger.start(*draw(rng, 1500, quadratic), target=target, alpha=alpha)
        wrong = ledger.accept_threshold is not None and true_error(ledger.accept_threshold) > target
        for b in range(6):
            run_batch(ledger, rng, 1000, quadratic, 0.05, seed, b)
            t = ledger.accept_threshold
            wrong = wrong or (t is not None and true_error(t) > target)
        bad += wrong
    print(f"{bad} of {seeds} streams ever certified a threshold whose error exceeds the target")
    assert bad / seeds <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / seeds)


def test_drift_tightens_within_one_batch() -> None:
    rng = np.random.default_rng(3)
    clean: Rate = lambda s: 0.002 * (1 - s)  # noqa: E731
    drifted: Rate = lambda s: np.full(len(s), 0.3)  # noqa: E731
    ledger = AuditLedger.start(*draw(rng, 5000, clean), target=0.01)
    for b in range(4):
        run_batch(ledger, rng, 2000, clean, 0.05, 0, b)
    before = ledger.accept_threshold
    assert before is not None and before < 0.5  # certified, and accepting most facts
    run_batch(ledger, rng, 2000, drifted, 0.05, 0, 4)
    after = ledger.accept_threshold
    assert ledger.drifts == 1
    assert after is None or after > before
    assert run_batch(ledger, rng, 2000, drifted, 0.05, 0, 5)["accept_share"] < 0.2


def test_clean_evidence_loosens_the_threshold() -> None:
    """Validation too small to certify anything; the stream's labels bring a certificate, then more accepts."""
    rng = np.random.default_rng(4)
    clean: Rate = lambda s: np.full(len(s), 0.001)  # noqa: E731
    ledger = AuditLedger.start(*draw(rng, 300, clean), target=0.01)
    assert ledger.accept_threshold is None  # 300 error-free facts cannot certify 1 % (367 needed at alpha / 2)
    shares = [run_batch(ledger, rng, 500, clean, 0.02, 0, b)["accept_share"] for b in range(6)]
    assert shares[0] == 0.0 and shares[-1] > 0.9
    # a graded stream: the certificate found from review labels keeps the true error within the target
    ledger = AuditLedger.start(*draw(rng, 400, quadratic), target=0.01)
    shares = [run_batch(ledger, rng, 1000, quadratic, 0.02, 0, b)["accept_share"] for b in range(8)]
    assert shares[0] == 0.0 and min(shares[-3:]) > 0.2
    assert ledger.accept_threshold is not None and true_error(ledger.accept_threshold) <= 0.01


def test_ledger_round_trips_through_json() -> None:
    rng = np.random.default_rng(5)
    ledger = AuditLedger.start(*draw(rng, 3000, quadratic), target=0.01)
    run_batch(ledger, rng, 500, quadratic, 0.05, 0, 0)
    again = AuditLedger.from_dict(json.loads(json.dumps(ledger.as_dict())))
    assert again == ledger
    s, y = draw(rng, 500, quadratic)
    for lg in (ledger, again):
        lg.add(s, y, np.ones(len(s)))
    assert ledger.update() == again.update()


def test_labels_to_certify() -> None:
    need = labels_to_certify(0.0, 0.0, target=0.0007, alpha=0.05)
    assert need is not None and 4200 < need < 4300  # ~ 3 / target, as min_clean_accepts says
    assert labels_to_certify(0.001, 100.0, target=0.0007, alpha=0.05) is None
