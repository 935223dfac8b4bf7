"""Corroboration: independent sources asserting the same fact, weighted by learned source trust.

Source trust is learned from past verdicts and review decisions as the smoothed share of a source's
judged claims that were true (a Beta(a, b) prior keeps a new source near ``a / (a + b)``). A claim's
probability is then the noisy-or of its distinct sources' trusts, as in TruthFinder
(Yin, Han & Yu, KDD 2007) without the implication term:

.. math::
    P(\\text{true}) = 1 - \\prod_{s \\in S(f)} (1 - \\tau_s)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from factloom.graph.types import entity_key
from factloom.verify.base import Claim, GraphView, VerifierResult

__all__ = ["SourceTrust", "CorroborationVerifier"]


class SourceTrust:
    """Per-source trust from (source, was_true) outcomes.

    Args:
        prior_true: pseudo-count of true claims for every source (default 1).
        prior_false: pseudo-count of false claims (default 1: an unknown source starts at 0.5).
    """

    def __init__(self, prior_true: float = 1.0, prior_false: float = 1.0) -> None:
        self.prior_true, self.prior_false = prior_true, prior_false
        self.counts: dict[str, tuple[int, int]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(sources={len(self.counts)})"

    @classmethod
    def from_counts(cls, counts: Mapping[str, tuple[int, int]], mean: float = 0.95, strength: float = 10.0
                    ) -> SourceTrust:
        """Trust from per-source (true, false) counts with a Beta prior of the given ``mean`` and
        ``strength`` (pseudo-counts): a source is presumed reliable until its record says otherwise,
        so a clean short record never raises doubt, and each rejection costs more the shorter it is."""
        if not 0.0 < mean < 1.0 or strength <= 0:
            raise ValueError(f"need 0 < mean < 1 and strength > 0, got {mean}, {strength}")
        trust = cls(prior_true=mean * strength, prior_false=(1.0 - mean) * strength)
        trust.counts = {s: (int(a), int(b)) for s, (a, b) in counts.items()}
        return trust

    def learn(self, outcomes: Iterable[tuple[str, bool]]) -> SourceTrust:
        for source, true in outcomes:
            t, f = self.counts.get(source, (0, 0))
            self.counts[source] = (t + int(true), f + int(not true))
        return self

    def trust(self, source: str) -> float:
        t, f = self.counts.get(source, (0, 0))
        return (t + self.prior_true) / (t + f + self.prior_true + self.prior_false)

    def as_dict(self) -> Mapping[str, float]:
        return {s: self.trust(s) for s in self.counts}


class CorroborationVerifier:
    """Sources of the same fact in the graph and in the chunk, combined by noisy-or of their trust.

    When none of a claim's sources has a history (a fresh ledger, new sources) the verifier abstains:
    trust nobody has earned says nothing either way.
    """

    name = "corroboration"
    version = "corroboration-1"

    def __init__(self, trust: SourceTrust) -> None:
        self.trust = trust

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        chunk: dict[tuple[str, str, str], set[str]] = {}
        for c in claims:
            if c.source:
                chunk.setdefault(_key(c.subject, c.predicate, c.object), set()).add(c.source)
        out = []
        for c in claims:
            key = _key(c.subject, c.predicate, c.object)
            sources = set(chunk.get(key, ()))
            for fact in graph.get((c.subject, c.predicate), ()):
                if entity_key(fact.object) == key[2]:
                    sources.update(fact.sources)
            out.append(self._result(sorted(sources)))
        return out

    def _result(self, sources: list[str]) -> VerifierResult:
        if not any(self.trust.counts.get(s) for s in sources):
            why = "no source with a track record" if sources else "no source given"
            return VerifierResult(self.name, None, why, details={"sources": sources}, model_version=self.version)
        miss = 1.0
        for s in sources:
            miss *= 1.0 - self.trust.trust(s)
        p = 1.0 - miss
        trust = {s: round(self.trust.trust(s), 4) for s in sources}
        listed = ", ".join(f"{s} (trust {t:.2f})" for s, t in trust.items())
        return VerifierResult(self.name, p, f"asserted by {len(sources)} source(s): {listed}", score=p,
                              details={"sources": sources, "trust": trust}, model_version=self.version)


def _key(s: str, p: str, o: str) -> tuple[str, str, str]:
    return entity_key(s), p, entity_key(o)
