"""Corroboration with learned source trust on hand-made cases."""

from __future__ import annotations

from datetime import UTC, datetime

from factloom.graph.types import StoredFact
from factloom.verify.base import Claim
from factloom.verify.corroboration import CorroborationVerifier, SourceTrust


def _claim(source: str, o: str = "France") -> Claim:
    return Claim(submission_id="s", fact_id=f"f-{source}-{o}", subject="Paris", predicate="capital_of",
                 object=o, source=source)


def test_corroborated_fact_scores_high_and_lone_unknown_source_abstains() -> None:
    trust = SourceTrust().learn([("wiki", True)] * 20 + [("spam", False)] * 20 + [("blog", True)])
    v = CorroborationVerifier(trust)
    stored = StoredFact("g1", "Paris", "capital_of", "France", ["wiki"], 1.0, None, None)
    now = datetime.now(UTC)
    both, lone, spam = v.check([_claim("blog"), _claim("newbie", "Texas"), _claim("spam", "Spain")],
                               {("Paris", "capital_of"): [stored]}, now)
    assert both.probability is not None and both.probability > 0.95
    assert "wiki" in both.explanation and "blog" in both.explanation
    assert lone.probability is None
    assert spam.probability is not None and spam.probability < 0.1


def test_trust_is_learned_from_outcomes() -> None:
    trust = SourceTrust().learn([("a", True), ("a", True), ("a", False)])
    assert trust.trust("a") == 3 / 5
    assert trust.trust("unseen") == 0.5


def test_sources_are_presumed_reliable_until_their_record_says_otherwise() -> None:
    trust = SourceTrust.from_counts({"wiki": (98, 2), "spam": (0, 3), "fresh": (1, 0)}, mean=0.95, strength=10)
    assert trust.trust("newbie") == 0.95 and trust.trust("fresh") > 0.95
    assert trust.trust("spam") < 0.75 < 0.95 < trust.trust("wiki")
    v = CorroborationVerifier(trust)
    strangers, spam = v.check([_claim("x"), _claim("spam", "Texas")], {}, datetime.now(UTC))
    assert strangers.probability is None
    assert spam.probability is not None and spam.probability < 0.75 and "spam (trust 0.73)" in spam.explanation
