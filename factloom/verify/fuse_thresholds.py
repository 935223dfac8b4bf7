"""How the learned fusion's thresholds are certified and reported (:mod:`factloom.verify.fuse_model`).

The scan of :func:`factloom.verify.certify.certify_accept_threshold` runs on held-out classifier
log-odds: accept on the scores, reject on the negated scores with the labels flipped. The helpers
here choose where that fixed sequence of tests begins, say why nothing passed, and show a passing
certificate at its calibrated probability, which is what people read.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from factloom.verify.certify import Certificate, clopper_pearson_upper, min_clean_accepts

__all__ = ["start_block", "why_uncertified", "shown_as_probability"]


def start_block(s: np.ndarray, target: float, *, alpha: float, start: float) -> np.ndarray:
    """Where the fixed sequence of tests begins: the top ``start * min_clean_accepts`` scores form one block.

    Starting at the fewest facts that could pass would demand a spotless top; one wrong fact there
    ends the scan. A first test on a larger block tolerates a few. The block is chosen from the
    scores alone, before any label is looked at, so the fixed-sequence guarantee is unchanged.
    """
    n0 = min(len(s), int(np.ceil(start * min_clean_accepts(target, alpha))))
    if n0 <= 1:
        return s
    out = s.copy()
    top = np.argsort(-s, kind="stable")[:n0]
    out[top] = s[top[-1]]
    return out


def why_uncertified(s: np.ndarray, y: np.ndarray, target: float, *, alpha: float, start: float) -> str:
    """Why nothing passed: too few facts at all, or too many errors in the first block tested."""
    need = min_clean_accepts(target, alpha)
    if len(s) < need:
        return (f"cannot certify {target:g}: needs at least {need} error-free accepted validation facts "
                f"at {1 - alpha:.0%} confidence; validation has {len(s)} facts")
    n0 = min(len(s), int(np.ceil(start * need)))
    k0 = int((y[np.argsort(-s, kind="stable")[:n0]] == 0).sum())
    return (f"cannot certify {target:g}: the first block tested (top {n0} of {len(s)} validation facts) has "
            f"{k0} errors, {1 - alpha:.0%} UCB {clopper_pearson_upper(k0, n0, alpha):.4f} > {target:g}")


def shown_as_probability(cert: Certificate, prob: float | None, side: str, why: str) -> Certificate:
    """The certificate with its threshold as a calibrated probability (the scan ran on log-odds)."""
    if not cert.certified:
        return replace(cert, reason=why)
    if prob is None:
        return cert
    wrong = "true facts" if side == "p <=" else "errors"
    reason = (f"{cert.errors}/{cert.accepted} {wrong} at fused {side} {prob:.4f}; {1 - cert.alpha:.0%} UCB "
              f"{cert.upper_bound:.5f} <= {cert.target:g}")
    return replace(cert, threshold=prob, reason=reason)
