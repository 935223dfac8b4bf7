"""Audit sampling: which automatically decided facts go to the blind audit.

:class:`AuditSampler` sends a share of the automatically decided facts (accepted and rejected) to a
blind audit. Facts are stratified by fused probability; stratum ``h`` is audited with inclusion
probability :math:`\\pi_h`, allocated like Neyman (1934) in proportion to the standard deviation of an
error there, :math:`\\sqrt{r_h(1-r_h)}` with :math:`r_h = \\min(p_h, 1-p_h)` at the stratum's middle,
so facts close to the thresholds — where errors live — are audited more often than near-certain ones.
Selection is deterministic: fact ``i`` is audited iff ``u(seed, id_i) < pi_h`` with ``u`` a hash mapped
to [0, 1), so a worker can recompute who was audited. An audit label never changes a fact; it only
enters the evidence, with weight :math:`1/\\pi_h` (:mod:`factloom.verify.audit.ledger`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["AuditSampler", "DEFAULT_EDGES", "uniform_hash"]

# fused-probability strata: fine near both ends, where the automatic verdicts and their rare errors are
DEFAULT_EDGES = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 1.0)
_FLOOR = 0.25  # no stratum is audited at less than a quarter of the share: bounds the weights at 4/share


def uniform_hash(seed: int | str, fact_id: str) -> float:
    """A uniform number in [0, 1) fixed by ``seed`` and ``fact_id`` (blake2b, 64 bits)."""
    digest = hashlib.blake2b(f"{seed}:{fact_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


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
