"""The check stage end to end: every verifier through the real API, Celery worker, Neo4j and ledger."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database
from tests.support.api import facts, post, submission_ids, wait_batch, wait_status

pytestmark = pytest.mark.integration

PLACES = [
    ("Paris", "instance_of", "city"), ("Lyon", "instance_of", "city"), ("Rome", "instance_of", "city"),
    ("France", "instance_of", "country"), ("Italy", "instance_of", "country"),
    ("Ada Lovelace", "instance_of", "person"),
    ("France", "capital", "Paris"), ("Italy", "capital", "Rome"), ("Lyon", "located_in", "France"),
]


def checks_of(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["verifier"]: c for c in item["checks"]}


def settle(settings: Settings) -> None:
    """Let every worker process relearn what it learns periodically (types, source trust)."""
    time.sleep(settings.verifier_refresh_s + 1.0)


def test_implausible_fact_waits_for_review_with_reasons_from_several_verifiers(
    api: httpx.Client, db: Database, settings: Settings
) -> None:
    kb = "chk-implausible"
    wait_batch(api, post(api, kb, facts(PLACES, source="atlas")))
    # a source whose claims the checks rejected (their validity ends before it starts)
    inverted = [{"subject": "Lyon", "predicate": "twinned_with", "object": f"Town {i}", "source": "rumours",
                 "valid_from": "2020-01-01T00:00:00Z", "valid_to": "2019-01-01T00:00:00Z"} for i in range(3)]
    done = wait_batch(api, post(api, kb, inverted))
    assert done["counts"]["rejected"] == 3
    settle(settings)

    (sid,) = submission_ids(db, post(api, kb, facts([("France", "capital", "Ada Lovelace")], source="rumours")))
    item = wait_status(api, sid, "needs_review")
    by = checks_of(item)
    assert "Paris" in by["consistency"]["explanation"] and by["consistency"]["probability"] == 0.5
    assert by["types"]["probability"] < 0.5
    assert "type violation" in by["types"]["explanation"] and "person" in by["types"]["explanation"]
    assert by["corroboration"]["probability"] < 0.9 and "rumours" in by["corroboration"]["explanation"]
    for silent in ("plausibility", "text_evidence", "image_evidence"):
        assert by[silent]["probability"] is None and by[silent]["explanation"]
    fusion = item["fusion"]
    assert fusion["verdict"] == "review" and (fusion["accept"], fusion["reject"]) == (0.9, 0.1)
    assert fusion["probability"] == by["types"]["probability"]  # the min rule: the most doubtful decides
    assert fusion["versions"]["fusion"] == "min-rule-1" and fusion["versions"]["scorer"] is None
    assert set(fusion["abstained"]) == {"plausibility", "text_evidence", "image_evidence"}

    queue = api.get("/v1/review", params={"kb": kb}).json()
    [listed] = [i for i in queue["items"] if i["id"] == sid]
    assert listed["fusion"] == fusion and checks_of(listed)["types"] == by["types"]


def test_fact_corroborated_by_two_trusted_sources_is_accepted(
    api: httpx.Client, db: Database, store: Neo4jStore, settings: Settings
) -> None:
    kb = "chk-corroborated"
    for source in ("reuters", "apnews"):
        rows = [(f"Film {source} {i}", "directed_by", f"Director {i}") for i in range(4)]
        wait_batch(api, post(api, kb, facts(rows, source=source)))
    settle(settings)
    claim = ("Blade Runner", "directed_by", "Ridley Scott")
    batch = post(api, kb, facts([claim], source="reuters") + facts([claim], source="apnews"))
    wait_batch(api, batch)
    first, second = (api.get(f"/v1/facts/{s}").json() for s in submission_ids(db, batch))
    for item in (first, second):
        assert item["status"] == "committed"
        corroboration = checks_of(item)["corroboration"]
        assert corroboration["probability"] > 0.95 and min(corroboration["details"]["trust"].values()) > 0.8
        assert "reuters" in corroboration["explanation"] and "apnews" in corroboration["explanation"]
        assert item["fusion"]["verdict"] == "accept"
    assert sorted(store.facts_by_id(kb, [first["fact_id"]])[0].sources) == ["apnews", "reuters"]


def test_text_evidence_that_supports_is_accepted_and_unrelated_text_goes_to_review(
    api: httpx.Client, db: Database
) -> None:
    kb = "chk-text"
    rows = [
        {"subject": "Blade Runner", "predicate": "directed_by", "object": "Ridley Scott", "source": "critic",
         "evidence": {"text": "It rained all week. Blade Runner is a 1982 film directed by Ridley Scott."}},
        {"subject": "Alien", "predicate": "written_by", "object": "Dan O'Bannon", "source": "critic",
         "evidence": {"text": "Bananas are rich in potassium. The stock market fell on Monday."}},
    ]
    supported, unrelated = submission_ids(db, post(api, kb, rows))
    good = checks_of(wait_status(api, supported, "committed"))["text_evidence"]
    assert good["probability"] > 0.9 and "directed by Ridley Scott" in good["explanation"]
    assert good["model_version"] == "all-MiniLM-L6-v2" and good["details"]["best_sentence"] == 1
    item = wait_status(api, unrelated, "needs_review")
    bad = checks_of(item)["text_evidence"]
    assert bad["probability"] < 0.5 and "does not support" in bad["explanation"]
    assert item["fusion"]["probability"] == bad["probability"]
