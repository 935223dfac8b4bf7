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
claim raises doubt (review), it never makes the claim near-certainly false. No evidence text: the
verifier abstains.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from factloom.verify.base import Claim, GraphView, VerifierResult

__all__ = ["TextEvidenceVerifier", "split_sentences", "verbalise"]

Encode = Callable[[list[str]], npt.NDArray[np.float32]]
# a sentence ends at . ! or ? before white space, but not after an initial ("C. Jay Cox")
_SENTENCE = re.compile(r"(?<=[.!?])(?<!\b[A-Z]\.)\s+")


def split_sentences(text: str, limit: int = 32) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()][:limit]


def verbalise(claim: Claim) -> str:
    return f"{claim.subject} {claim.predicate.replace('_', ' ')} {claim.object}"


class TextEvidenceVerifier:
    """Args:
        encode: texts → L2-normalised embeddings, e.g. ``Embedder.encode``.
        slope, middle: the logistic link from best cosine to probability.
        floor: the lowest probability unsupportive evidence can give.
        version: the sentence model's version, stored with each result.
    """

    name = "text_evidence"

    def __init__(self, encode: Encode, slope: float = 12.0, middle: float = 0.25, version: str = "text-1",
                 floor: float = 0.25) -> None:
        self.encode, self.slope, self.middle, self.version, self.floor = encode, slope, middle, version, floor

    def __repr__(self) -> str:
        return f"{type(self).__name__}(slope={self.slope}, middle={self.middle}, version={self.version!r})"

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        sentences = [split_sentences(c.evidence_text or "") for c in claims]
        texts = [verbalise(c) for c, s in zip(claims, sentences, strict=True) if s]
        texts += [t for s in sentences for t in s]
        vectors = self.encode(texts) if texts else np.zeros((0, 1), dtype=np.float32)  # (C + S, D)
        n_claims = sum(1 for s in sentences if s)
        claim_vec, sent_vec = vectors[:n_claims], vectors[n_claims:]
        out, ci, si = [], 0, 0
        for sents in sentences:
            if not sents:
                out.append(VerifierResult(self.name, None, "no evidence text", model_version=self.version))
                continue
            cos = sent_vec[si:si + len(sents)] @ claim_vec[ci]  # (S,)
            best = int(np.argmax(cos))
            c = float(cos[best])
            link = 1.0 / (1.0 + math.exp(-self.slope * (c - self.middle)))
            p = self.floor + (1.0 - self.floor) * link
            verb = ("supports" if link >= 0.85 else
                    "is related to but does not clearly support" if link >= 0.5 else "does not support")
            out.append(VerifierResult(
                self.name, p, f"evidence {verb} the claim (cosine {c:.2f}): \"{sents[best][:120]}\"",
                score=c, details={"best_sentence": best, "cosine": c}, model_version=self.version,
            ))
            ci, si = ci + 1, si + len(sents)
        return out
