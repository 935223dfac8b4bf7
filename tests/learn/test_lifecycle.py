"""Model lifecycle in serving, on the real platform: shadow and A/B trials, the monitor's periods,
automatic rollback and the A/B sequential test."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.learn.monitor import MonitorConfig, hoeffding_interval, look, record_learn_failure
from factloom.learn.qa import QA, Job, train_kb
from factloom.learn.serving import in_ab
from factloom.ledger import AuditEvent, Database, ModelVersion, activate_version, register_version
from factloom.model.embedder import Embedder
from factloom.platform.process import Service
from factloom.platform.services import services
from tests.support.api import admin_sign_in, assert_problem, facts, wait_batch
from tests.support.data import FAMILY, FAMILY_QUESTIONS

pytestmark = pytest.mark.integration

KB = "lifecycle-family"
ASKED = [q.format(s) for q, by in FAMILY_QUESTIONS for s in by]


def ask(client: httpx.Client, question: str) -> dict[str, Any]:
    response = client.post("/v1/query", json={"question": question, "kb": KB, "top_k": 3})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def served(client: httpx.Client) -> str:
    return str(ask(client, ASKED[0])["model_versions"]["reasoner"])


def wait_served(client: httpx.Client, version: str, within_s: float = 20.0) -> float:
    """Seconds until every one of four questions in a row is answered by ``version``."""
    t0 = time.monotonic()
    while any(served(client) != version for _ in range(4)):
        assert time.monotonic() - t0 < within_s, f"the API still serves {served(client)}, not {version}"
        time.sleep(0.3)
    return time.monotonic() - t0


def wait_figures(api: httpx.Client, version: str, role: str, figure: str, at_least: int) -> dict[str, Any]:
    """``version``'s figures in ``role`` once ``figure`` reached ``at_least`` (each API process adds
    its counts to Redis every second)."""
    deadline = time.monotonic() + 15
    while (found := api.get(f"/v1/models/{version}/figures").json()["roles"][role])[figure] < at_least:
        assert time.monotonic() < deadline, (role, found)
        time.sleep(0.3)
    return found  # type: ignore[no-any-return]


def status(db: Database, version: str) -> str:
    with db.session() as session:
        row = session.get(ModelVersion, version)
        assert row is not None
        return row.status


@pytest.fixture(scope="module")
def versions(api: httpx.Client, store: Neo4jStore, db: Database, settings: Settings) -> dict[str, str]:
    """The kb's active router and reasoner, and a weaker reasoner (fewer epochs) as a candidate."""
    wait_batch(api, api.post("/v1/facts", json={"kb": KB, "facts": facts(FAMILY, "family")}).json()["batch_id"])
    qas = [QA(q.format(s), [a], "family") for q, by in FAMILY_QUESTIONS for s, a in by.items()]
    embedder = Embedder(None, device="cpu")
    job = Job(KB, ["family"], train=qas * 4, dev=qas)
    weak = train_kb(["reasoner"], store=store, embedder=embedder, db=db, home=settings.home, job=job, epochs=1,
                    show=False)["reasoner"]
    trained = train_kb(["router", "reasoner"], store=store, embedder=embedder, db=db, home=settings.home, job=job,
                       epochs=15, show=False)
    assert status(db, weak) == "retired"
    wait_served(api, trained["reasoner"])
    return {**trained, "weak": weak}


def test_ab_assignment_is_sticky_per_key_and_keeps_its_share() -> None:
    keys = [f"key-{i}" for i in range(2000)]
    for share in (0.1, 0.5):
        drawn = sum(in_ab(k, "reasoner-v2", share) for k in keys) / len(keys)
        assert abs(drawn - share) <= 0.03, (share, drawn)
    assert all(in_ab(k, "reasoner-v2", 0.1) == in_ab(k, "reasoner-v2", 0.1) for k in keys)
    # a new trial draws its sides afresh: not the same 10 % of keys every time
    assert {k for k in keys if in_ab(k, "reasoner-v2", 0.1)} != {k for k in keys if in_ab(k, "reasoner-v3", 0.1)}


def test_shadow_answers_beside_the_active_version_and_never_changes_a_response(
        api: httpx.Client, db: Database, settings: Settings, versions: dict[str, str]) -> None:
    before = [ask(api, q) for q in ASKED]
    shadowed = api.post(f"/v1/models/{versions['weak']}/shadow")
    assert shadowed.status_code == 200, shadowed.text
    assert (shadowed.json()["status"], shadowed.json()["traffic_share"]) == ("shadow", 0.0)
    time.sleep(5.5)  # each API process re-reads the registry every 5 s
    after = [ask(api, q) for q in ASKED]
    for b, a in zip(before, after, strict=True):
        assert a["model_versions"]["reasoner"] == versions["reasoner"]
        # the same answers by the same paths; a score may move in its last digits with the batch it
        # was computed in (a shadow question can share a batch), never more
        assert [(x["name"], x["paths"]) for x in a["answers"]] == [(x["name"], x["paths"]) for x in b["answers"]]
        assert [x["score"] for x in a["answers"]] == pytest.approx([x["score"] for x in b["answers"]], abs=2e-3)
    for question in ASKED * 2:  # more questions: a shadow gives way whenever another question waits
        ask(api, question)
    shadow = wait_figures(api, versions["weak"], "shadow", "compared", 1)
    assert shadow["questions"] >= shadow["compared"] and shadow["errors"] == 0 and shadow["p95_ms"] is not None
    assert 0.0 <= shadow["agreement"] <= 1.0
    active = wait_figures(api, versions["reasoner"], "active", "questions", 2 * len(ASKED))
    assert active["errors"] == 0
    metrics = api.get("/metrics").text
    assert re.search(rf'factloom_shadow_agreement_total{{.*version="{versions["weak"]}"', metrics)
    stopped = api.post(f"/v1/models/{versions['weak']}/stop")
    assert stopped.status_code == 200 and stopped.json()["status"] == "candidate"
    with db.session() as session:
        actions = [e.action for e in session.query(AuditEvent).filter_by(target=versions["weak"])]
    assert {"model.shadow", "model.trial_end"} <= set(actions)


def test_ab_sends_its_share_of_keys_to_the_candidate_sticky_per_key(
        api: httpx.Client, db: Database, client_with: Callable[[str], httpx.Client],
        versions: dict[str, str]) -> None:
    share = 0.5
    inside: httpx.Client | None = None
    outside: httpx.Client | None = None
    while inside is None or outside is None:  # one key of each side (each key id is drawn at random)
        client = client_with("query")
        if in_ab(_key_id(db, client), versions["weak"], share):
            inside = inside or client
        else:
            outside = outside or client
    started = api.post(f"/v1/models/{versions['weak']}/ab", json={"share": share})
    assert started.status_code == 200, started.text
    assert (started.json()["status"], started.json()["traffic_share"]) == ("ab", share)
    wait_served(inside, versions["weak"])
    for _ in range(10):  # sticky: each key stays on its side
        assert served(inside) == versions["weak"]
        assert served(outside) == versions["reasoner"]
    wait_figures(api, versions["weak"], "ab", "questions", 10)
    assert api.post(f"/v1/models/{versions['weak']}/stop").status_code == 200
    wait_served(inside, versions["reasoner"])

    assert_problem(api.post(f"/v1/models/{versions['weak']}/ab", json={"share": 1.5}), 422, "share")
    assert_problem(api.post(f"/v1/models/{versions['weak']}/stop"), 409, "not on trial")
    assert_problem(api.post(f"/v1/models/{versions['reasoner']}/shadow"), 409, "active already")
    assert_problem(api.post("/v1/models/no-such-version/ab", json={"share": 0.1}), 404, "no model version")
    assert_problem(client_with("query").post(f"/v1/models/{versions['weak']}/shadow"), 403, "'admin' scope")


def _key_id(db: Database, client: httpx.Client) -> str:
    from factloom.ledger import ApiKey

    prefix = str(client.headers["Authorization"]).split()[1].split("_")[1]
    with db.session() as session:
        return str(session.query(ApiKey).filter_by(prefix=prefix).one().id)


def test_the_sequential_test_promotes_a_better_trial_and_stops_a_worse_one(
        api: httpx.Client, db: Database, settings: Settings, versions: dict[str, str]) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    config = MonitorConfig(fail_periods=3, min_questions=10**6, min_feedback=10**6)  # only the A/B test decides
    low, high = hoeffding_interval(90, 100, 50, 100, look=1, alpha=0.05)
    assert low < 0.4 < high and high - low < 1.0
    # wider at a later look: the error budget is spent across looks
    assert hoeffding_interval(90, 100, 50, 100, look=5, alpha=0.05)[0] < low

    def mark(version: str, right: int, wrong: int) -> None:
        items = [{"question": f"q{i}", "answer": "a", "correct": i < right, "reasoner_version": version}
                 for i in range(right + wrong)]
        assert api.post("/v1/feedback", json={"kb": KB, "items": items}).status_code == 201

    for trial_right, active_right, decision in ((190, 100, "promote"), (40, 200, "stop")):
        assert api.post(f"/v1/models/{versions['weak']}/ab", json={"share": 0.1}).status_code == 200
        assert not [d for d in look(db, client, config) if d.get("ab")]  # the first look starts its clock
        mark(versions["weak"], trial_right, 200 - trial_right)
        mark(versions["reasoner"], active_right, 200 - active_right)
        decided = [d for d in look(db, client, config) if d.get("ab")]
        assert [(d["version"], d["ab"]) for d in decided] == [(versions["weak"], decision)], decided
        if decision == "promote":
            assert status(db, versions["weak"]) == "active"
            activate_version(db, versions["reasoner"], actor="test")  # the original serves again
        assert status(db, versions["weak"]) in ("retired", "candidate")
    wait_served(api, versions["reasoner"])


def test_failing_learn_updates_for_three_periods_roll_back(db: Database, settings: Settings,
                                                           versions: dict[str, str], tmp_path: Path) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    with db.session() as session:
        artefact = Path(session.get(ModelVersion, versions["reasoner"]).artefact)  # type: ignore[union-attr]
    child = register_version(db, kind="reasoner", kb=KB, artefact=artefact, metrics={}, parent=versions["reasoner"])
    config = MonitorConfig(fail_periods=3)
    try:
        mine = lambda: [j for j in look(db, client, config) if j.get("version") == child]  # noqa: E731
        assert mine()[0]["state"] == "unknown"  # no traffic, no feedback, no update: no evidence
        for period in (1, 2, 3):
            record_learn_failure(client, KB, "reasoner", None, "failed")
            time.sleep(0.01)
            (judged,) = mine()
            assert (judged["state"], judged["failing"]) == ("failed", period)
        assert judged["rolled_back_to"] == versions["reasoner"]
        assert status(db, child) == "rolled_back" and status(db, versions["reasoner"]) == "active"
        with db.session() as session:
            event = session.query(AuditEvent).filter_by(action="model.rollback", target=child).one()
        assert event.actor == "monitor" and event.details["to"] == versions["reasoner"]
        assert "3 failing periods in a row" in event.details["reason"]
    finally:
        if status(db, versions["reasoner"]) != "active":
            activate_version(db, versions["reasoner"], actor="test")


def test_a_scorer_whose_verdict_mix_turns_is_rolled_back(db: Database, settings: Settings, tmp_path: Path) -> None:
    from factloom.learn.serving import Recorder

    client = redis.Redis.from_url(settings.redis_url)
    kb = "lifecycle-verdicts"
    (tmp_path / "s").write_bytes(b"a scorer")
    parent = register_version(db, kind="scorer", kb=kb, artefact=tmp_path / "s", metrics={})
    figures = Recorder(client)
    figures.decided(kb, parent, ["accepted"] * 80 + ["rejected"] * 10 + ["needs_review"] * 10)
    figures.flush()
    child = register_version(db, kind="scorer", kb=kb, artefact=tmp_path / "s", metrics={}, parent=parent)
    config = MonitorConfig(fail_periods=3, min_questions=20)

    def period(verdicts: list[str]) -> dict[str, Any]:
        figures.decided(kb, child, verdicts)
        figures.flush()
        return next(j for j in look(db, client, config) if j.get("version") == child)

    like_parent = ["accepted"] * 24 + ["rejected"] * 3 + ["needs_review"] * 3
    assert period(like_parent)["state"] == "passed"
    turned = ["accepted"] * 5 + ["rejected"] * 20 + ["needs_review"] * 5
    assert [(j["state"], j["failing"]) for j in (period(turned), period(turned))] == [("failed", 1), ("failed", 2)]
    few = period(["accepted"] * 5)  # too few facts: no evidence, the count stays
    assert (few["state"], few["failing"]) == ("unknown", 2)
    judged = period(turned)
    assert judged["failing"] == 3 and judged["rolled_back_to"] == parent
    assert any("rejected 0.67 > parent's 0.10" in r for r in judged["reasons"]), judged
    assert status(db, child) == "rolled_back" and status(db, parent) == "active"


def test_a_scorer_in_shadow_judges_the_same_facts_unseen(api: httpx.Client, db: Database, store: Neo4jStore,
                                                          settings: Settings) -> None:
    from factloom.learn.verification import train_scorer
    from factloom.ledger import start_trial

    kb = "lifecycle-films"
    films = [(f"Film {i}", "has_genre", ("Drama", "Comedy", "Horror")[i % 3]) for i in range(20)]
    films += [(f"Film {i}", "directed_by", f"Director {i % 4}") for i in range(20)]
    wait_batch(api, api.post("/v1/facts", json={"kb": kb, "facts": facts(films, "catalogue")}).json()["batch_id"])
    shadowed, _ = train_scorer(store, db, kb=kb, models_dir=settings.models_dir, rank=8, epochs=2, progress=False)
    active, _ = train_scorer(store, db, kb=kb, models_dir=settings.models_dir, rank=8, epochs=5, progress=False)
    start_trial(db, shadowed, mode="shadow", actor="test")
    time.sleep(settings.registry_refresh_s + 0.5)  # the workers re-read the registry this often
    claims = [("Film 1", "has_genre", "Horror"), ("Film 2", "directed_by", "Director 3"),
              ("Film 30", "has_genre", "Drama")]  # the last one names a film no scorer saw: both abstain
    batch = api.post("/v1/facts", json={"kb": kb, "facts": facts(claims, "probe")}).json()["batch_id"]
    wait_batch(api, batch)
    deadline = time.monotonic() + 15
    while (shadow := api.get(f"/v1/models/{shadowed}/figures").json()["roles"]["shadow"])["compared"] < len(claims):
        assert time.monotonic() < deadline, shadow
        time.sleep(0.5)
    assert shadow["errors"] == 0 and shadow["agreement"] is not None
    with db.session() as session:
        from factloom.ledger import FactSubmission

        rows = session.query(FactSubmission).filter_by(batch_id=batch).all()
        # the active scorer judged them; the shadow's verdicts are nowhere in the ledger
        checks = [c for r in rows for c in (r.checks or [])]
    assert all(c.model_version != shadowed for c in checks)
    assert api.post(f"/v1/models/{shadowed}/stop").status_code == 200
    assert status(db, active) == "active"


@pytest.fixture
def admin_app(live: dict[str, Service], settings: Settings) -> Iterator[Any]:
    """The admin UI of an app on the session's stores (Redis among them: the figures live there)."""
    from fastapi.testclient import TestClient

    from factloom.platform.app import create_app

    with TestClient(create_app(settings.model_copy(update={"query_warm_up": False})),
                    base_url="http://127.0.0.1") as client:
        yield client


def test_admin_tries_a_version_sees_its_figures_and_rolls_back(admin_app: Any, tmp_path: Path) -> None:
    from factloom.learn.serving import Recorder
    from factloom.ledger import list_versions
    from factloom.platform.admin.users import create_user

    client = admin_app
    resources = client.app.state.resources
    db = resources.db
    create_user(db=db, name="lifecycle-admin", role="admin", password="admin-pass-1")
    (tmp_path / "r").write_bytes(b"a reasoner")
    parent = register_version(db, kind="reasoner", kb="trials", artefact=tmp_path / "r", metrics={})
    child = register_version(db, kind="reasoner", kb="trials", artefact=tmp_path / "r", metrics={}, parent=parent)
    trial = register_version(db, kind="reasoner", kb="trials", artefact=tmp_path / "r", metrics={}, activate=False)
    figures = Recorder(resources.redis)
    for ms in (30.0, 40.0, 900.0):
        figures.answered("trials", [child], "active", ms)
    figures.answered("trials", [trial], "ab", 20.0, ok=False)
    figures.flush()
    csrf = admin_sign_in(client, "lifecycle-admin", "admin-pass-1")
    started = client.post(f"/admin/models/{trial}/trial", data={"csrf": csrf, "mode": "ab", "share": "20"},
                          follow_redirects=True)
    assert started.status_code == 200 and f"{trial} answers 20% of the questions of trials" in started.text
    page = client.get("/admin/models", params={"kb": "trials"}).text
    assert "ab 20 %" in page and '<svg class="versions"' in page and "Serving versions side by side" in page
    assert "<b>active</b> 3 q · 0.0 % failed · p95 ≤ 1000 ms" in page
    assert "<b>ab</b> 1 q · 100.0 % failed" in page
    assert ">Stop</button>" in page and ">Promote</button>" in page and ">Roll back</button>" in page
    assert client.post(f"/admin/models/{trial}/trial", data={"csrf": csrf, "mode": "stop"},
                       follow_redirects=False).status_code == 303
    assert client.post(f"/admin/models/{trial}/trial", data={"csrf": csrf, "mode": "stop"}).status_code == 409
    assert client.post(f"/admin/models/{trial}/trial", data={"csrf": csrf, "mode": "oracle"}).status_code == 400
    back = client.post("/admin/models/rollback", data={"csrf": csrf, "kb": "trials", "kind": "reasoner"},
                       follow_redirects=True)
    assert back.status_code == 200 and f"{child} rolled back: {parent} serves trials again" in back.text
    assert {v.id: v.status for v in list_versions(db, kb="trials")} == {
        parent: "active", child: "rolled_back", trial: "candidate"}
    assert "Rolled back" in back.text and "rolled back by hand" in back.text
    assert client.post("/admin/models/rollback", data={"csrf": "made-up", "kb": "trials", "kind": "reasoner"},
                       follow_redirects=False).status_code == 403


@pytest.fixture
def monitoring(live: dict[str, Service], settings: Settings) -> Iterator[Settings]:
    """The session's worker and beat swapped for ones whose monitor looks every 2 s and needs 3
    questions a period (a real beat, a real worker: the end-to-end path)."""
    changed = settings.model_copy(update={"monitor_period_s": 2.0, "monitor_min_questions": 3})
    found = services(changed)
    for name in ("beat", "worker"):
        live[name].stop()
    try:
        for name in ("worker", "beat"):
            found[name].start()
        yield changed
    finally:
        for name in ("beat", "worker"):
            found[name].stop()
        for name in ("worker", "beat"):
            live[name].start()


def test_a_broken_version_is_rolled_back_after_three_failing_periods_and_the_alert_counts_it(
        api: httpx.Client, db: Database, versions: dict[str, str], monitoring: Settings, tmp_path: Path) -> None:
    (tmp_path / "broken.pt").write_bytes(b"not a model")
    broken = register_version(db, kind="reasoner", kb=KB, artefact=tmp_path / "broken.pt", metrics={},
                              parent=versions["reasoner"])
    stop = threading.Event()
    answered: list[dict[str, Any]] = []

    def traffic() -> None:  # a steady client: every answer must come, broken version or not
        while not stop.is_set():
            answered.append(ask(api, ASKED[len(answered) % len(ASKED)]))
            time.sleep(0.1)

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while status(db, broken) != "rolled_back":
            assert time.monotonic() < deadline, "no rollback within 60 s"
            time.sleep(0.5)
        with db.session() as session:
            event = session.query(AuditEvent).filter_by(action="model.rollback", target=broken).one()
        assert event.details["to"] == versions["reasoner"] and "error rate" in event.details["reason"]
        # served again within one period and the registry refresh
        assert wait_served(api, versions["reasoner"], within_s=2.0 + 10.0) <= 12.0
    finally:
        stop.set()
        thread.join()
    # while the broken version was active the baseline answered, and said so: nothing failed
    assert any("did not load" in (a.get("note") or "") for a in answered)
    assert status(db, versions["reasoner"]) == "active"
    metrics = api.get("/metrics").text
    assert re.search(rf'factloom_model_rollbacks_total{{kb="{KB}",kind="reasoner"}} [1-9]', metrics), \
        [line for line in metrics.splitlines() if "rollbacks" in line]
