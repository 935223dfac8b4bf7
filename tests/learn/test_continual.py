"""Continual learning on the real platform: the learner Celery worker updates a kb's scorer (EWC,
gates, registry) and its reasoner from answer feedback; a failing candidate and a killed worker
leave the active version serving."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import select

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.learn.artefacts import ewc_path, load_probe
from factloom.learn.continual import LearnConfig, committed_since, scorer_due, update_scorer
from factloom.learn.feedback import questions_from, reasoner_due
from factloom.ledger import AuditEvent, Database, ModelVersion, active_version, list_versions
from factloom.platform.process import Service
from factloom.platform.services import RedisService, services
from factloom.workers.learning import held, lock_name
from factloom.workers.tasks import enqueue_learn
from tests.support.api import checked_with, facts, wait_batch
from tests.support.data import GENRES, films

pytestmark = pytest.mark.integration



def load(api: httpx.Client, kb: str, rows: list[tuple[str, str, str]]) -> None:
    response = api.post("/v1/facts", json={"kb": kb, "facts": facts(rows, source="catalogue")})
    assert response.status_code == 202, response.text
    wait_batch(api, response.json()["batch_id"])


def wait_version(db: Database, kind: str, kb: str, done: Callable[[ModelVersion], bool],
                 timeout: float = 180.0) -> ModelVersion:
    deadline = time.monotonic() + timeout
    while True:
        found = [v for v in list_versions(db, kind=kind, kb=kb) if done(v)]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no {kind} of kb {kb} came: {list_versions(db, kind=kind, kb=kb)}"
        time.sleep(0.5)


def test_the_learner_gives_a_kb_its_scorer_then_learns_new_entities_with_ewc(
    api: httpx.Client, db: Database, settings: Settings, live: dict[str, Service]
) -> None:
    kb = "learn-scorer"
    load(api, kb, films(0, 100))
    assert kb in scorer_due(db, min_facts=200) and kb not in scorer_due(db, min_facts=201)
    enqueue_learn(kb, "scorer", force=True)  # what the beat's plan does once learn_min_facts are new
    first = wait_version(db, "scorer", kb, lambda v: v.status == "active")
    assert first.parent is None and first.watermark is not None and ewc_path_of(first).exists()
    assert kb not in scorer_due(db, min_facts=1)  # nothing committed since its watermark

    load(api, kb, films(100, 150))  # 50 films the scorer has never seen
    new, _ = committed_since(db, kb, first.watermark)
    assert len(new) == 100
    assert api.get("/v1/models/learn", params={"kb": kb, "kind": "scorer"}).json()["new"] == 100
    asked = api.post("/v1/models/learn", json={"kb": kb, "kind": "scorer"})  # as 'factloom learn' asks
    assert asked.status_code == 202 and asked.json() == {"kb": kb, "kind": "scorer", "new": 100}, asked.text
    update = wait_version(db, "scorer", kb, lambda v: v.parent == first.id and bool(v.gates))
    gates = update.gates or {}
    assert gates["passed"] is True and update.status == "active", gates
    assert gates["new_knowledge"]["value"] > gates["new_knowledge"]["parent"] == 0.0  # the parent abstained
    assert gates["retention"]["value"] >= 0.95 * gates["retention"]["parent"] > 0
    assert (update.metrics or {})["new_entities"] == 50 and ewc_path_of(update).exists()
    # retention was measured on the first scorer's held-out facts; the next update's probe mixes in new ones
    first_probe, next_probe = load_probe(Path(first.artefact)), load_probe(Path(update.artefact))
    assert first_probe and gates["retention"]["items"] == len(first_probe) == 20  # a tenth of 200
    assert next_probe and any(int(s.split()[1]) >= 100 for s, _, _ in next_probe)
    assert active_version(db, kind="scorer", kb=kb).id == update.id  # type: ignore[union-attr]
    with db.session() as session:  # the promotion is audited
        (event,) = session.scalars(select(AuditEvent).where(AuditEvent.target == update.id)).all()
        assert event.actor == "learner" and event.action == "model.promote" and event.details["retired"] == [first.id]
    nothing = api.post("/v1/models/learn", json={"kb": kb, "kind": "scorer"})
    assert nothing.status_code == 409 and "nothing to learn" in nothing.json()["detail"]
    # the check workers swap it in: the plausibility verifier judges a claim about a new film
    item = checked_with(api, db, ("Film 120", "has_genre", "Drama"), f"{kb}-probe", "plausibility", update.id,
                        settings, kb=kb)
    plausibility = next(c for c in item["checks"] if c["verifier"] == "plausibility")
    assert plausibility["probability"] is not None


def ewc_path_of(version: ModelVersion) -> Path:
    return ewc_path(Path(version.artefact))


def test_a_candidate_that_fails_retention_stays_a_candidate_and_an_update_is_idempotent(
    api: httpx.Client, db: Database, store: Neo4jStore, settings: Settings
) -> None:
    kb = "learn-gate"
    load(api, kb, films(0, 40))
    config = LearnConfig(min_facts=10, epochs=3)
    first = update_scorer(store, db, kb=kb, models_dir=settings.models_dir, config=config)
    assert first.result == "first"
    load(api, kb, films(40, 60))
    # no candidate keeps 10x its parent's figure: the gate must fail
    failed = update_scorer(store, db, kb=kb, models_dir=settings.models_dir,
                           config=LearnConfig(min_facts=10, epochs=3, retention=10.0))
    assert failed.result == "failed" and failed.gates["retention"]["passed"] is False
    with db.session() as session:
        row = session.get(ModelVersion, failed.version)
        assert row is not None and row.status == "candidate" and row.parent == first.version
    assert active_version(db, kind="scorer", kb=kb).id == first.version  # type: ignore[union-attr]
    assert kb not in scorer_due(db, min_facts=1)  # the plan does not queue the failed update again
    # the same parent and the same new facts: the update is found, not trained again
    again = update_scorer(store, db, kb=kb, models_dir=settings.models_dir, config=config)
    assert again.result == "done" and again.version == failed.version
    # too few new facts: nothing to do
    assert update_scorer(store, db, kb=kb, models_dir=settings.models_dir,
                         config=LearnConfig(min_facts=10**6)).result == "skipped"


def test_feedback_through_the_api_teaches_the_router_and_reasoner(
    api: httpx.Client, db: Database, settings: Settings, live: dict[str, Service]
) -> None:
    kb = "learn-feedback"
    load(api, kb, films(0, 60))

    def mark(first: int, last: int) -> None:
        items = [{"question": f"who directed [Film {i}]", "answer": f"Director {i % 8}", "correct": True}
                 for i in range(first, last)]
        items += [{"question": f"what genre is [Film {i}]", "answer": "Opera", "correct": False,
                   "expected": GENRES[i % 8 % 4]} for i in range(first, last)]
        response = api.post("/v1/feedback", json={"kb": kb, "items": items})
        assert response.status_code == 201, response.text

    mark(0, 30)
    assert kb in reasoner_due(db, min_feedback=60) and kb not in reasoner_due(db, min_feedback=61)
    enqueue_learn(kb, "reasoner", force=True)
    first = wait_version(db, "reasoner", kb, lambda v: v.status == "active", timeout=300)
    router = active_version(db, kind="router", kb=kb)
    assert router is not None and first.parent is None and (first.metrics or {})["train_questions"] == 60

    mark(30, 60)
    enqueue_learn(kb, "reasoner", force=True)
    update = wait_version(db, "reasoner", kb, lambda v: v.parent == first.id and bool(v.gates), timeout=300)
    gates = update.gates or {}
    assert set(gates) == {"passed", "retention", "new_knowledge"}
    assert gates["retention"]["items"] == 60 and gates["new_knowledge"]["items"] == 6  # a tenth held out
    assert (update.metrics or {})["learned_questions"] == 54
    assert update.status == ("active" if gates["passed"] else "candidate")


def test_questions_from_feedback_keep_the_latest_word_and_named_right_answers() -> None:
    rows = [("who directed [X]", "A", True, None), ("who directed [X]", "B", False, "C"),
            ("who directed [X]", "A", False, None), ("what is [Y]", "D", False, None)]
    (qa,) = questions_from(rows)
    assert qa.question == "who directed [X]" and qa.answers == ["C"]


def test_a_learner_killed_mid_update_leaves_the_active_version_serving_and_the_next_run_learns(
    api: httpx.Client, db: Database, settings: Settings, live: dict[str, Service]
) -> None:
    kb = "learn-kill"
    load(api, kb, films(0, 40))
    enqueue_learn(kb, "scorer", force=True)
    first = wait_version(db, "scorer", kb, lambda v: v.status == "active")
    load(api, kb, films(40, 60))

    live["learner"].stop()
    slow = services(settings.model_copy(update={"learn_scorer_epochs": 100_000}))["learner"]  # an update that lasts
    slow.start()
    try:
        enqueue_learn(kb, "scorer", force=True)
        locks = redis.Redis.from_url(settings.redis_url)
        deadline = time.monotonic() + 60
        while not locks.exists(lock_name(kb, "scorer")):
            assert time.monotonic() < deadline, "the update never started"
            time.sleep(0.2)
        time.sleep(2)  # training now
        pid = slow.pid()
        assert pid is not None
        os.killpg(os.getpgid(pid), signal.SIGKILL)  # the worker and its pool child, mid-update
    finally:
        slow.stop()
    assert active_version(db, kind="scorer", kb=kb).id == first.id  # type: ignore[union-attr]
    # the dead update's row: a candidate that says where it was, with no gates, that cannot serve
    (dead, _) = list_versions(db, kind="scorer", kb=kb)
    assert dead.status == "candidate" and dead.parent == first.id and not dead.gates
    assert (dead.metrics or {})["progress"].startswith("tables grown")  # training when it was killed
    assert api.post(f"/v1/models/{dead.id}/activate").status_code == 409
    deadline = time.monotonic() + 3 * settings.learn_lock_ttl_s
    while locks.exists(lock_name(kb, "scorer")):  # nobody renews it any more
        assert time.monotonic() < deadline, "the dead worker's lock never expired"
        time.sleep(0.5)

    live["learner"].start()
    enqueue_learn(kb, "scorer", force=True)  # the next period's retry
    update = wait_version(db, "scorer", kb, lambda v: v.parent == first.id and bool(v.gates))
    assert update.id == dead.id  # the retry took the dead update's row over
    assert update.status in ("active", "candidate") and (update.gates or {}).get("passed") is not None


def test_an_update_lock_is_renewed_while_held_and_free_after(redis_service: RedisService, settings: Settings) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    with held(client, "factloom:test-lock", ttl_s=1.0) as mine:
        assert mine
        with held(client, "factloom:test-lock", ttl_s=1.0) as other:
            assert not other  # one holder at a time
        time.sleep(2.5)  # past its ttl: renewed meanwhile
        assert client.exists("factloom:test-lock")
    assert not client.exists("factloom:test-lock")
