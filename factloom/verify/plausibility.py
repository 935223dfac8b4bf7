"""Plausibility: how well a claim fits the graph's learned structure, from a KG-embedding scorer.

One batched scorer pass per call scores every claim the scorer can judge. The probability is the
scorer's per-relation calibrated probability; ``details`` carry the numbers a learned fusion can use
beside it (raw score, filtered ranks of the tail and the head, entity and relation-pair frequencies,
see :data:`factloom.model.scorer.FEATURE_NAMES`). A claim naming an entity or a relation the scorer
never saw gets an abstention with the reason, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from factloom.model.scorer import ComplExScorer
from factloom.verify.base import Claim, GraphView, VerifierResult

__all__ = ["PlausibilityVerifier"]


class PlausibilityVerifier:
    """Args:
        scorer: a trained (and preferably calibrated) :class:`ComplExScorer`.
        name: the verifier's name in results and in the fusion's features; two scorers (an ensemble)
            run as two verifiers with different names.
        version: stored with each result; defaults to the scorer's own version string.
    """

    def __init__(self, scorer: ComplExScorer, *, name: str = "plausibility", version: str | None = None) -> None:
        self.scorer = scorer
        self.name = name
        self.version = version or scorer.version

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"

    @classmethod
    def load(cls, path: Path, *, name: str = "plausibility", version: str | None = None) -> PlausibilityVerifier:
        return cls(ComplExScorer.load(path), name=name, version=version)

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        triples = [(c.subject, c.predicate, c.object) for c in claims]
        feats = self.scorer.features(triples) if triples else []
        out: list[VerifierResult] = []
        for triple, f in zip(triples, feats, strict=True):
            if f is None:
                why = self.scorer.unseen(triple) or "unseen by the scorer"
                out.append(VerifierResult(self.name, None, why, model_version=self.version))
                continue
            p = min(max(f["probability"], 0.0), 1.0)
            tail_rank, head_rank = round(math.exp(f["log_tail_rank"])), round(math.exp(f["log_head_rank"]))
            verb = "plausible" if p >= 0.5 else "implausible"
            reason = (f"{verb} by graph embedding (p {p:.2f}): object ranks {tail_rank} of "
                      f"{len(self.scorer.entities)} for '{triple[1]}', subject ranks {head_rank}")
            out.append(VerifierResult(self.name, p, reason, score=f["raw"], details=dict(f),
                                      model_version=self.version))
        return out
