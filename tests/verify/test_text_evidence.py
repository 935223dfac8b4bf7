"""Text evidence with the bundled sentence model: a supporting and a non-supporting sentence."""

from __future__ import annotations

from datetime import UTC, datetime

from factloom.model.embedder import Embedder
from factloom.verify.base import Claim
from factloom.verify.text_evidence import TextEvidenceVerifier, split_sentences


def _claim(text: str | None) -> Claim:
    return Claim(submission_id="s", fact_id="f", subject="Ridley Scott", predicate="directed",
                 object="Blade Runner", evidence_text=text)


def test_support_beats_unrelated_and_no_text_abstains() -> None:
    emb = Embedder(None, device="cpu")
    v = TextEvidenceVerifier(emb.encode, version=emb.version)
    good, bad, none = v.check([
        _claim("The weather was cold. Blade Runner is a 1982 film directed by Ridley Scott."),
        _claim("Bananas are rich in potassium. The stock market fell on Monday."),
        _claim(None),
    ], {}, datetime.now(UTC))
    assert good.probability is not None and bad.probability is not None
    assert good.probability > 0.9 and 0.25 <= bad.probability < 0.5
    assert "Ridley Scott" in good.explanation and good.details["best_sentence"] == 1
    assert none.probability is None
    assert split_sentences("A b. C d! E?") == ["A b.", "C d!", "E?"]
    assert split_sentences("Written by C. Jay Cox. Next one.") == ["Written by C. Jay Cox.", "Next one."]
