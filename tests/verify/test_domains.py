"""Type constraints learned from accepted facts, a declared override and a violation."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from factloom.verify.base import Claim
from factloom.verify.domains import TypeConstraints, TypeVerifier, load_schema

TYPES = {"Paris": ["city"], "Lyon": ["city"], "France": ["country"], "Ada": ["person"], "Mars": []}
FACTS = [("Paris", "capital_of", "France"), ("Lyon", "located_in", "France")]


def _claim(s: str, p: str, o: str) -> Claim:
    return Claim(submission_id="s", fact_id="f", subject=s, predicate=p, object=o)


def test_learned_types_catch_a_violation_and_pass_a_fit() -> None:
    v = TypeVerifier(TypeConstraints().learn(FACTS, TYPES), TYPES)
    now = datetime.now(UTC)
    ok, bad, unknown, new_pred = v.check(
        [_claim("Lyon", "capital_of", "France"), _claim("Ada", "capital_of", "France"),
         _claim("Mars", "capital_of", "France"), _claim("Ada", "born_in", "Paris")], {}, now)
    assert ok.probability is not None and ok.probability >= 0.9
    # a learned constraint doubts (review), it does not condemn
    assert bad.probability is not None and 0.1 < bad.probability < 0.5 and "Ada" in bad.explanation
    assert unknown.probability is not None  # object side still judged
    assert new_pred.probability is None  # nothing known about born_in: abstain


def test_declared_schema_overrides_learned(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"capital_of": {"domain": ["person", "city"]}}))
    cons = TypeConstraints().learn(FACTS, TYPES).override(load_schema(path))
    [r] = TypeVerifier(cons, TYPES).check([_claim("Ada", "capital_of", "France")], {}, datetime.now(UTC))
    assert r.probability is not None and r.probability >= 0.9
    [rule] = TypeVerifier(cons, TYPES).check([_claim("France", "capital_of", "France")], {}, datetime.now(UTC))
    assert rule.probability is not None and rule.probability < 0.1 and "must take" in rule.explanation
    counted = TypeConstraints(min_support=2).learn_counts({"capital_of": {"city": 2, "person": 1}}, {})
    assert counted.domain["capital_of"] == frozenset({"city"})
    path.write_text(json.dumps({"capital_of": {"kinds": []}}))
    with pytest.raises(ValueError):
        load_schema(path)
