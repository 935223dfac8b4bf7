"""Text evidence: does the submitted evidence text support the claim?

The claim is verbalised (``subject predicate object``), the evidence split into sentences, and all
claims and sentences of a chunk are embedded in one batched call of the sentence model. The best
cosine between the claim and any of its sentences goes through a logistic link

.. math::
    p = f + (1 - f)\\,\\sigma\\big(a\\,(\\max_j \\cos(c, e_j) - b)\\big)

whose ``a, b`` can be fitted on labelled evidence. The defaults (a middle of 0.25 and a slope of 12)
suit all-MiniLM-L6-v2, where a sentence stating the claim scores about 0.85, text about the same
entities 0.4–0.6 and unrelated text about 0: evidence at a cosine of 0.41 or more reaches p 0.9, so
only evidence about something else raises doubt. The floor ``f`` (default 0.25) is there because a cosine can
tell that a sentence states the claim, not that it refutes it: evidence that does not support the
claim raises doubt (review), it never makes the claim near-certainly false.

A claim submitted without evidence text is checked against *stored* evidence about its entities
(``stored``: per entity name, the evidence texts of earlier judged-true facts, most recent first, as
the worker reads them from the ledger). Text written for another fact of the same entity is about
that entity whatever it says (a cosine of 0.5–0.8 with any claim about it: "Blade Runner directed by
Steven Spielberg" scores 0.79 against "Blade Runner is a 1982 film directed by Ridley Scott.", the
true claim 0.88), so a stored sentence counts only when it names both the claim's subject and its
object and its cosine reaches ``stored_min_cosine`` (0.6); then it supports through the same link,
else the verifier abstains. Stored evidence never raises doubt. Only sentences that name both
entities are embedded, at most ``per_claim`` per claim and ``max_stored`` distinct ones per call,
in the same single embedding call. No evidence text and no stored evidence: it abstains.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np
import numpy.typing as npt

from factloom.verify.base import Claim, GraphView, VerifierResult

__all__ = ["StoredText", "TextEvidenceVerifier", "split_sentences", "verbalise"]

Encode = Callable[[list[str]], npt.NDArray[np.float32]]
# a sentence ends at . ! or ? before white space, but not after an initial ("C. Jay Cox")
_SENTENCE = re.compile(r"(?<=[.!?])(?<!\b[A-Z]\.)\s+")


def split_sentences(text: str, limit: int = 32) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()][:limit]


def _names(name: str) -> re.Pattern[str]:
    """Matches ``name`` as a whole word or phrase, any case ("Paris" not in "comparison")."""
    return re.compile(rf"(?<!\w){re.escape(name.casefold())}(?!\w)")


def verbalise(claim: Claim) -> str:
    return f"{claim.subject} {claim.predicate.replace('_', ' ')} {claim.object}"


class StoredText(Protocol):
    """Stored evidence: the text submitted with an earlier fact (e.g. ``ledger.evidence.EvidenceText``)."""

    @property
    def fact_id(self) -> str: ...

    @property
    def text(self) -> str: ...


@dataclass(frozen=True, slots=True)
class _Candidate:
    sentence: str
    fact_id: str | None  # None: the claim's own evidence text


class TextEvidenceVerifier:
    """Args:
        encode: texts → L2-normalised embeddings, e.g. ``Embedder.encode``.
        slope, middle: the logistic link from best cosine to probability.
        floor: the lowest probability unsupportive evidence can give.
        version: the sentence model's version, stored with each result.
    """

    name = "text_evidence"

    def __init__(self, encode: Encode, slope: float = 12.0, middle: float = 0.25, version: str = "text-1",
                 floor: float = 0.25, per_claim: int = 2, max_stored: int = 1000,
                 stored_min_cosine: float = 0.6) -> None:
        self.encode, self.slope, self.middle, self.version, self.floor = encode, slope, middle, version, floor
        self.per_claim, self.max_stored, self.stored_min_cosine = per_claim, max_stored, stored_min_cosine
        self.stored: Mapping[str, Sequence[StoredText]] | None = None  # None: no lookup was made

    def __repr__(self) -> str:
        return f"{type(self).__name__}(slope={self.slope}, middle={self.middle}, version={self.version!r})"

    def with_stored(self, stored: Mapping[str, Sequence[StoredText]]) -> TextEvidenceVerifier:
        """A copy that also reads ``stored`` (entity name → its stored evidence texts, most recent first)."""
        other = copy.copy(self)
        other.stored = stored
        return other

    def _stored_candidates(self, claim: Claim, budget: set[str]) -> list[_Candidate]:
        """Up to ``per_claim`` stored sentences naming both the claim's subject and object, the most
        recent texts first; a sentence not yet in ``budget`` is taken only while the call's bound allows."""
        subject, obj = _names(claim.subject), _names(claim.object)
        out: dict[str, _Candidate] = {}
        for name in dict.fromkeys((claim.subject, claim.object)):
            for stored in (self.stored or {}).get(name, ()):
                for sent in split_sentences(stored.text):
                    if len(out) >= self.per_claim:
                        return list(out.values())
                    folded = sent.casefold()
                    if sent in out or not subject.search(folded) or not obj.search(folded):
                        continue
                    if sent not in budget:
                        if len(budget) >= self.max_stored:
                            return list(out.values())
                        budget.add(sent)
                    out[sent] = _Candidate(sent, stored.fact_id)
        return list(out.values())

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        budget: set[str] = set()
        candidates = [
            [_Candidate(s, None) for s in split_sentences(c.evidence_text)] if c.evidence_text
            else self._stored_candidates(c, budget)
            for c in claims
        ]
        # one embedding call for the chunk: each claim with candidates, each distinct sentence once
        index: dict[str, int] = {}
        for c, cands in zip(claims, candidates, strict=True):
            if cands:
                index.setdefault(verbalise(c), len(index))
                for cand in cands:
                    index.setdefault(cand.sentence, len(index))
        vectors = self.encode(list(index)) if index else np.zeros((0, 1), dtype=np.float32)  # (T, D)
        out = []
        for claim, cands in zip(claims, candidates, strict=True):
            if not cands:
                out.append(self._none(claim, bound_hit=len(budget) >= self.max_stored))
                continue
            cos = vectors[[index[x.sentence] for x in cands]] @ vectors[index[verbalise(claim)]]  # (S,)
            best = int(np.argmax(cos))
            cosine = float(cos[best])
            link = 1.0 / (1.0 + math.exp(-self.slope * (cosine - self.middle)))
            p = self.floor + (1.0 - self.floor) * link
            quote = cands[best].sentence[:120]
            fact_id = cands[best].fact_id
            if fact_id is None:
                verb = ("supports" if link >= 0.85 else
                        "is related to but does not clearly support" if link >= 0.5 else "does not support")
                out.append(VerifierResult(
                    self.name, p, f"evidence {verb} the claim (cosine {cosine:.2f}): \"{quote}\"",
                    score=cosine, details={"best_sentence": best, "cosine": cosine}, model_version=self.version,
                ))
                continue
            details = {"stored": True, "fact_id": fact_id, "cosine": cosine, "sentences": len(cands)}
            if cosine >= self.stored_min_cosine:
                out.append(VerifierResult(
                    self.name, p, f"supported by stored evidence of fact {fact_id} (cosine {cosine:.2f}): \"{quote}\"",
                    score=cosine, details=details, model_version=self.version,
                ))
            else:
                out.append(VerifierResult(
                    self.name, None,
                    f"no evidence text; stored evidence names '{claim.subject}' and '{claim.object}' but does "
                    f"not state the claim (best cosine {cosine:.2f}, fact {fact_id}: \"{quote}\")",
                    score=cosine, details=details, model_version=self.version,
                ))
        return out

    def _none(self, claim: Claim, bound_hit: bool) -> VerifierResult:
        if self.stored is None:
            why = "no evidence text"
        elif not any(self.stored.get(n) for n in (claim.subject, claim.object)):
            why = f"no evidence text, and no stored evidence about '{claim.subject}' or '{claim.object}'"
        elif bound_hit:
            why = f"no evidence text; stored evidence not read (this check's bound of {self.max_stored} sentences)"
        else:
            n = sum(len(self.stored.get(x, ())) for x in dict.fromkeys((claim.subject, claim.object)))
            why = (f"no evidence text; none of {n} stored evidence texts about its entities names both "
                   f"'{claim.subject}' and '{claim.object}'")
        return VerifierResult(self.name, None, why, model_version=self.version)
