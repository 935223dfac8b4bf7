"""End to end through the real API, Celery worker, Neo4j, Redis and SQLite."""

from __future__ import annotations

import time

import httpx
import pytest

from factloom.graph import Neo4jStore
from factloom.ledger import Database
from factloom.platform.ingest import service as ingest
from tests.support.api import MOVIES, ask, facts, submission_ids, wait_batch, wait_status

pytestmark = pytest.mark.integration


def test_post_facts_commit_to_neo4j_and_answer_with_paths(api: httpx.Client, store: Neo4jStore) -> None:
    kb = "e2e"
    response = api.post("/v1/facts", json={"kb": kb, "facts": facts(MOVIES)})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["count"] == len(MOVIES) and body["duplicates"] == 0
    done = wait_batch(api, body["batch_id"])
    assert done["counts"]["committed"] == len(MOVIES)
    assert store.count(kb) == (8, len(MOVIES))

    answers = ask(api, kb, "who directed [Blade Runner]")
    assert answers[0]["name"] == "Ridley Scott"
    unlinked = api.post("/v1/query", json={"question": "who directed [No Such Film]", "kb": kb}).json()
    assert unlinked["answers"] == [] and "could be linked" in unlinked["note"]
    path = answers[0]["paths"][0]
    steps = [(s["subject"], s["predicate"], s["object"], s["sources"]) for s in path]
    assert steps == [("Blade Runner", "directed_by", "Ridley Scott", ["wikimovies"])]
    stored = store.facts_by_id(kb, [s["fact_id"] for s in path])
    assert [(f.subject, f.predicate, f.object, f.sources) for f in stored] == [
        ("Blade Runner", "directed_by", "Ridley Scott", ["wikimovies"])
    ]

    two_hop = ask(api, kb, "which films share actors with [Witness]")
    assert "Blade Runner" in [a["name"] for a in two_hop]
    assert all(len(p) == 2 for a in two_hop if a["name"] == "Blade Runner" for p in a["paths"])


def test_resubmission_is_idempotent(api: httpx.Client, store: Neo4jStore, db: Database) -> None:
    kb = "idem"
    rows = facts(MOVIES[:3])
    first = api.post("/v1/facts", json={"kb": kb, "facts": rows}).json()
    wait_batch(api, first["batch_id"])
    again = api.post("/v1/facts", json={"kb": kb, "facts": rows + rows}).json()
    assert (again["count"], again["duplicates"]) == (0, 6)
    keyed = [{**rows[0], "key": "k-1"}, {**rows[1], "key": "k-1"}]
    once = api.post("/v1/facts", json={"kb": kb, "facts": keyed}).json()
    twice = api.post("/v1/facts", json={"kb": kb, "facts": keyed}).json()
    assert (once["count"], once["duplicates"], twice["count"], twice["duplicates"]) == (1, 1, 0, 2)
    wait_batch(api, once["batch_id"])
    # the same fact from another source is a new submission that corroborates one graph fact
    other = api.post("/v1/facts", json={"kb": kb, "facts": facts(MOVIES[:1], source="imdb")}).json()
    assert other["count"] == 1
    wait_batch(api, other["batch_id"])
    assert store.count(kb) == (4, 3)
    fact_id = api.get(f"/v1/facts/{submission_ids(db, other['batch_id'])[0]}").json()["fact_id"]
    assert sorted(store.facts_by_id(kb, [fact_id])[0].sources) == ["imdb", "wikimovies"]


def test_functional_contradiction_waits_for_review_and_a_decision_commits_it(
    api: httpx.Client, store: Neo4jStore, db: Database
) -> None:
    kb = "contra"
    wait_batch(api, api.post("/v1/facts", json={"kb": kb, "facts": facts(MOVIES[:3])}).json()["batch_id"])
    claim = facts([("Blade Runner", "release_year", "1999")], "blog")
    conflicting = api.post("/v1/facts", json={"kb": kb, "facts": claim}).json()
    (sid,) = submission_ids(db, conflicting["batch_id"])
    item = wait_status(api, sid, "needs_review")
    consistency = next(c for c in item["checks"] if c["verifier"] == "consistency")
    assert "1982" in consistency["explanation"] and consistency["probability"] == 0.5
    assert any(c["verifier"] == "fusion" for c in item["checks"])

    queue = api.get("/v1/review", params={"kb": kb, "predicate": "release_year"}).json()
    assert [i["id"] for i in queue["items"]] == [sid] and queue["total"] == 1
    assert ask(api, kb, "when was [Blade Runner] released")[0]["name"] == "1982"

    decided = api.post(f"/v1/review/{sid}", json={"decision": "accept", "reason": "director's cut date"})
    assert decided.status_code == 200 and decided.json()["status"] == "reviewed"
    wait_status(api, sid, "committed")
    assert [a["name"] for a in ask(api, kb, "when was [Blade Runner] released")][:1] == ["1999"]
    again = api.post(f"/v1/review/{sid}", json={"decision": "reject"})
    assert again.status_code == 409 and again.headers["content-type"] == "application/problem+json"
    history = store.current_facts(kb, [("Blade Runner", "release_year")])[("Blade Runner", "release_year")]
    assert [f.object for f in history] == ["1999"]


def test_a_reviewer_can_keep_both_values_of_a_functional_predicate(
    api: httpx.Client, store: Neo4jStore, db: Database
) -> None:
    # two films of one name: the second year is a contradiction to the checker, not to the reviewer
    kb = "bothhold"
    wait_batch(api, api.post("/v1/facts", json={"kb": kb, "facts": facts([("Show Boat", "release_year", "1936")])}
                             ).json()["batch_id"])
    second = api.post("/v1/facts", json={"kb": kb, "facts": facts([("Show Boat", "release_year", "1951")], "remake")})
    (sid,) = submission_ids(db, second.json()["batch_id"])
    wait_status(api, sid, "needs_review")
    unknown = api.post(f"/v1/review/{sid}", json={"decision": "both"})
    assert unknown.status_code == 422 and unknown.headers["content-type"] == "application/problem+json"
    decided = api.post(f"/v1/review/{sid}", json={"decision": "keep_both", "reason": "the 1951 remake"})
    assert decided.status_code == 200 and decided.json() == {"id": sid, "status": "reviewed", "decision": "keep_both"}
    wait_status(api, sid, "committed")
    history = store.current_facts(kb, [("Show Boat", "release_year")])[("Show Boat", "release_year")]
    assert sorted(f.object for f in history) == ["1936", "1951"]  # both current: nothing superseded


def test_rejected_and_pending_facts_never_answer(api: httpx.Client, db: Database) -> None:
    kb = "neveranswer"
    wait_batch(api, api.post("/v1/facts", json={"kb": kb, "facts": facts(MOVIES[:3])}).json()["batch_id"])
    bad = api.post("/v1/facts", json={"kb": kb, "facts": [
        {"subject": "Blade Runner", "predicate": "written_by", "object": "Nobody",
         "valid_from": "2020-01-01T00:00:00Z", "valid_to": "2019-01-01T00:00:00Z"},
        {"subject": "Blade Runner", "predicate": "release_year", "object": "2049"},
    ]}).json()
    inverted, contradiction = submission_ids(db, bad["batch_id"])
    wait_status(api, inverted, "rejected")
    wait_status(api, contradiction, "needs_review")
    api.post(f"/v1/review/{contradiction}", json={"decision": "reject", "reason": "sequel, not this film"})
    wait_status(api, contradiction, "rejected")
    # a pending submission, in the ledger but not yet checked
    from factloom.platform.ingest.schemas import FactIn

    pending = FactIn(subject="Blade Runner", predicate="directed_by", object="Pending Person")
    ingest.submit(db=db, kb=kb, facts=[pending], max_facts=10, api_key_id=None)
    questions = ("who wrote [Blade Runner]", "when was [Blade Runner] released", "who directed [Blade Runner]")
    names = {a["name"] for q in questions for a in ask(api, kb, q)}
    assert not names & {"Nobody", "2049", "Pending Person"}
    assert "Ridley Scott" in names


def test_new_entities_get_embeddings_for_vector_linking(api: httpx.Client, store: Neo4jStore) -> None:
    kb = "embeds"
    wait_batch(api, api.post("/v1/facts", json={"kb": kb, "facts": facts(MOVIES)}).json()["batch_id"])
    deadline = time.monotonic() + 60
    while store.run("MATCH (e:Entity {kb: $kb}) WHERE e.embedding IS NULL RETURN count(e) AS n", kb=kb)[0]["n"]:
        assert time.monotonic() < deadline, "entities still without an embedding"
        time.sleep(0.5)
    dims = store.run("MATCH (e:Entity {kb: $kb}) RETURN size(e.embedding) AS d LIMIT 1", kb=kb)[0]["d"]
    assert dims == 384
