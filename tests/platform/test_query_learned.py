"""The learned router and reasoner through the real query API: trained on facts committed to the
real Neo4j, registered in the ledger, loaded by version, batched under concurrency."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.learn.qa import QA, Job, train_kb
from factloom.ledger import Database
from factloom.model.batching import DynamicBatcher, Overloaded
from factloom.model.embedder import Embedder
from tests.support.api import facts, submission_ids, wait_batch, wait_status
from tests.support.data import FAMILY, FAMILY_QUESTIONS

pytestmark = pytest.mark.integration

KB = "learned-family"


def ask(api: httpx.Client, question: str, **extra: Any) -> dict[str, Any]:
    response = api.post("/v1/query", json={"question": question, "kb": KB, "top_k": 3, **extra})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def trained(api: httpx.Client, store: Neo4jStore, db: Database, settings: Settings) -> dict[str, str]:
    wait_batch(api, api.post("/v1/facts", json={"kb": KB, "facts": facts(FAMILY, "family")}).json()["batch_id"])
    # before training: the service answers with the baseline
    body = ask(api, "where was the spouse of [anna] born")
    assert body["model_versions"]["reasoner"].startswith("pathrank")
    assert api.post("/v1/query", json={"question": "who is [anna]", "kb": KB, "reasoner": "learned"}
                    ).status_code == 409
    qas = [QA(q.format(s), [a], "family") for q, by in FAMILY_QUESTIONS for s, a in by.items()]
    job = Job(KB, ["family"], train=qas * 4, dev=qas)
    versions = train_kb(["router", "reasoner"], store=store, embedder=Embedder(None, device="cpu"), db=db,
                        home=settings.home, job=job, epochs=40, show=False)
    time.sleep(5.5)  # the API refreshes its registry lookup every 5 s
    return versions


def test_learned_answers_with_paths_whose_facts_exist(api: httpx.Client, store: Neo4jStore,
                                                     trained: dict[str, str]) -> None:
    for question, by in FAMILY_QUESTIONS:
        for seed, answer in by.items():
            body = ask(api, question.format(seed), reasoner="learned")
            assert body["model_versions"]["reasoner"] == trained["reasoner"]
            assert body["model_versions"]["router"] == trained["router"]
            # each operation's dtype, the question encoder's included, checked against fp32 once
            assert set(body["model_versions"]["precision"]) == {"encoder", "router", "reasoner"}
            assert set(body["model_versions"]["precision"].values()) <= {"fp32", "bf16"}
            top = body["answers"][0]
            assert top["name"] == answer, (question, seed, body["answers"])
            path = top["paths"][0]
            assert path[0]["subject"] == seed and path[-1]["object"] == answer
            ids = [s["fact_id"] for s in path]
            assert {f.fact_id for f in store.facts_by_id(KB, ids)} == set(ids)
            assert body["subgraph"]["routed_edges"] <= body["subgraph"]["candidate_edges"]
    # the default (no reasoner named) is now the learned one; the baseline stays available
    assert ask(api, "where was the child of [anna] born")["model_versions"]["reasoner"] == trained["reasoner"]
    base = ask(api, "where was the child of [anna] born", reasoner="baseline")
    assert base["model_versions"]["reasoner"].startswith("pathrank")


def test_reasoner_learns_on_the_graphs_the_router_retrieves(store: Neo4jStore, db: Database,
                                                            trained: dict[str, str]) -> None:
    from factloom.learn.qa import active_router, prepare
    from factloom.ledger.tables import ModelVersion

    with db.session() as session:
        assert session.get(ModelVersion, trained["router"]).metrics["retrieval"] == "k-hop"  # type: ignore[union-attr]
        assert session.get(ModelVersion, trained["reasoner"]).metrics["retrieval"] == "guided"  # type: ignore[union-attr]
    router = active_router(db, KB)
    assert router is not None and router.can_plan
    qas = [QA("what is the birthplace of [anna] 's husband 's father", ["dover"], "family")]
    embedder = Embedder(None, device="cpu")
    (khop,) = prepare(store, embedder, KB, qas, show=False)
    (guided,) = prepare(store, embedder, KB, qas, show=False, router=router)
    khop_ids, guided_ids = {e.fact_id for e in khop.edges}, {e.fact_id for e in guided.edges}
    # only the relations the router follows: fewer facts, the answer and its 3-hop path still there
    assert guided_ids < khop_ids
    assert guided.answers and [guided.nodes[i] for i in guided.answers] == [khop.nodes[i] for i in khop.answers]
    assert guided.relations == [("spouse", True), ("parents", True), ("place_of_birth", True)]
    assert active_router(db, "no-such-kb") is None


def test_rejected_and_pending_facts_never_in_a_learned_path(api: httpx.Client, db: Database,
                                                           trained: dict[str, str]) -> None:
    from factloom.platform.ingest import service as ingest
    from factloom.platform.ingest.schemas import FactIn

    bad = api.post("/v1/facts", json={"kb": KB, "facts": [
        {"subject": "bob", "predicate": "place_of_birth", "object": "paris"},  # functional: contradiction
    ]}).json()
    (contradiction,) = submission_ids(db, bad["batch_id"])
    wait_status(api, contradiction, "needs_review")
    api.post(f"/v1/review/{contradiction}", json={"decision": "reject", "reason": "test"})
    wait_status(api, contradiction, "rejected")
    ingest.submit(db=db, kb=KB, facts=[FactIn(subject="anna", predicate="spouse", object="zed")],
                  max_facts=10, api_key_id=None)  # pending: in the ledger, never checked
    for question in ("where was the spouse of [anna] born", "what is the birthplace of [anna] 's husband 's father"):
        body = ask(api, question, reasoner="learned", include_subgraph=True)
        names = {s[k] for a in body["answers"] for p in a["paths"] for s in p for k in ("subject", "object")}
        assert not names & {"paris", "zed"}
        assert not {"paris", "zed"} & set(body["subgraph"]["candidate_entities"])


def test_warm_up_loads_the_models_and_checks_their_precision(settings: Settings, trained: dict[str, str]) -> None:
    from factloom.platform.query.engine import get_engine
    from factloom.platform.query.service import warm_up
    from factloom.platform.resources import Resources

    resources = Resources.open(settings)  # a new process's resources: nothing loaded yet
    threshold = gc.get_threshold()
    try:
        engine = get_engine(settings, resources.db, resources.embedder, resources.figures)
        assert not engine.encoder_policy.chosen
        took = warm_up(resources)
        assert {"", KB} <= set(took)
        loaded = engine.learned(KB)
        assert loaded is not None and loaded.reasoner_version == trained["reasoner"]
        # what the first question would have checked is checked: every operation has its dtype
        assert set(engine.encoder_policy.chosen) == {"encoder"}
        # the speed probe timed the encoder itself, not its cache (a cached lookup takes ~0.05 ms)
        check = engine.encoder_policy.checks["encoder"]
        assert float(check["ms_fp32"]) > 0.5 and float(check["ms_low"]) > 0.5, check
        assert set(loaded.pipeline.policy.chosen) == {"router", "reasoner"}
        # what the process keeps for good is frozen out of the garbage collector's walks
        assert not any(o is loaded.pipeline.reasoner for o in gc.get_objects())
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        resources.close()


def test_concurrent_callers_each_get_their_own_answer(api: httpx.Client, trained: dict[str, str]) -> None:
    asks = [(q.format(s), a) for q, by in FAMILY_QUESTIONS for s, a in by.items()] * 4
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda qa: ask(api, qa[0], reasoner="learned")["answers"][0]["name"], asks))
    assert got == [a for _, a in asks]


def test_dynamic_batcher_groups_and_routes_results() -> None:
    sizes: list[int] = []
    lock = threading.Lock()

    def double(items: Any) -> list[int]:
        with lock:
            sizes.append(len(items))
        return [2 * x for x in items]

    batcher: DynamicBatcher[int, int] = DynamicBatcher(double, max_batch=8, window_ms=20)
    with ThreadPoolExecutor(max_workers=16) as pool:
        out = list(pool.map(batcher.submit, range(64)))
    assert out == [2 * x for x in range(64)]
    assert max(sizes) > 1 and max(sizes) <= 8 and sum(sizes) == 64

    def broken(items: Any) -> list[int]:
        raise RuntimeError("boom")

    failing: DynamicBatcher[int, int] = DynamicBatcher(broken, max_batch=4, window_ms=1)
    with pytest.raises(RuntimeError, match="boom"):
        failing.submit(1)


def test_batch_workers_run_batches_at_once() -> None:
    # two workers: a batch waiting on the store does not hold the next one back. Each batch waits
    # at a barrier for another batch to be running too; with one worker that would never happen.
    meet = threading.Barrier(2, timeout=10)

    def wait_for_company(items: Any) -> list[int]:
        meet.wait()
        return [x + 1 for x in items]

    batcher: DynamicBatcher[int, int] = DynamicBatcher(wait_for_company, max_batch=1, window_ms=1, workers=2)
    with ThreadPoolExecutor(max_workers=2) as pool:
        assert sorted(pool.map(batcher.submit, [1, 2])) == [2, 3]
    assert batcher.batches == 2
    with pytest.raises(ValueError, match="at least one worker"):
        DynamicBatcher(wait_for_company, workers=0)


def test_a_full_waiting_line_refuses_at_once() -> None:
    # the one worker holds a batch of one at the gate; two more items fill a line of two; the
    # fourth is refused without waiting, and everything queued is still answered
    gate = threading.Event()

    def held(items: Any) -> list[int]:
        gate.wait(10)
        return list(items)

    batcher: DynamicBatcher[int, int] = DynamicBatcher(held, max_batch=1, window_ms=0, max_waiting=2)
    with ThreadPoolExecutor(max_workers=3) as pool:
        running = pool.submit(batcher.submit, 0)
        deadline = time.monotonic() + 5
        while batcher.batches == 0:  # the worker took item 0 and waits at the gate
            assert time.monotonic() < deadline
            time.sleep(0.01)
        queued = [pool.submit(batcher.submit, i) for i in (1, 2)]
        while batcher._queue.qsize() < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(Overloaded, match="2 items already wait"):
            batcher.submit(3)
        gate.set()
        assert [running.result(), *(f.result() for f in queued)] == [0, 1, 2]


def test_eval_scores_the_active_or_a_named_reasoner_without_registering(
    store: Neo4jStore, db: Database, trained: dict[str, str]
) -> None:
    from factloom.learn.evaluate import evaluate
    from factloom.ledger import list_versions

    qas = [QA(q.format(s), [a], "family") for q, by in FAMILY_QUESTIONS for s, a in by.items()]
    before = len(list_versions(db, kb=KB))
    embedder = Embedder(None, device="cpu")
    scored = evaluate(store=store, embedder=embedder, db=db, kb=KB, questions=qas + [QA("who is [nobody]", ["x"], "x")],
                      show=False)
    assert scored == {"kb": KB, "reasoner": trained["reasoner"], "router": trained["router"], "questions": 7,
                      "linked": 6, "hits_at_1": round(6 / 7, 4)}  # an unlinked question is a miss
    named = evaluate(store=store, embedder=embedder, db=db, kb=KB, questions=qas, version=trained["reasoner"],
                     show=False)
    assert named["hits_at_1"] == 1.0
    with pytest.raises(SystemExit, match="no reasoner version 'router-x'"):
        evaluate(store=store, embedder=embedder, db=db, kb=KB, questions=qas, version="router-x", show=False)
    assert len(list_versions(db, kb=KB)) == before


def test_an_admin_rolls_the_reasoner_back_and_the_api_serves_the_older_version(
    api: httpx.Client, client_with: Callable[[str], httpx.Client], db: Database, trained: dict[str, str],
    tmp_path: Path,
) -> None:
    from factloom.ledger import AuditEvent, ModelVersion, register_version
    from factloom.model.pathrank import PathRankReasoner
    from tests.support.api import assert_problem

    def served() -> str:
        return str(ask(api, "where was the spouse of [anna] born")["model_versions"]["reasoner"])

    def wait_served(version: str) -> None:
        deadline = time.monotonic() + 20  # each API process re-reads the registry every 5 s
        while any(served() != version for _ in range(4)):
            assert time.monotonic() < deadline, f"the API still serves {served()}, not {version}"
            time.sleep(0.5)

    def statuses() -> dict[str, str]:
        listed = api.get("/v1/models", params={"kind": "reasoner", "kb": KB})
        assert listed.status_code == 200, listed.text
        return {m["version"]: m["status"] for m in listed.json()["items"]}

    original = trained["reasoner"]
    with db.session() as session:
        artefact = session.get(ModelVersion, original).artefact  # type: ignore[union-attr]
    newer = register_version(db, kind="reasoner", kb=KB, artefact=Path(artefact), metrics={"note": "a retrain"})
    wait_served(newer)
    assert statuses() == {newer: "active", original: "retired"}

    rolled = api.post(f"/v1/models/{original}/activate")
    assert rolled.status_code == 200, rolled.text
    assert (rolled.json()["status"], rolled.json()["kb"], rolled.json()["kind"]) == ("active", KB, "reasoner")
    assert statuses() == {newer: "retired", original: "active"}
    wait_served(original)
    with db.session() as session:
        audit = session.query(AuditEvent).filter_by(action="model.activate", target=original).one()
        assert audit.details == {"kind": "reasoner", "kb": KB, "retired": [newer]}

    # a corrupt artefact: the kb falls back to the baseline and says so; asked for learned, 503
    (tmp_path / "broken.pt").write_bytes(b"not a model")
    broken = register_version(db, kind="reasoner", kb=KB, artefact=tmp_path / "broken.pt", metrics={})
    wait_served(PathRankReasoner.version)
    assert "learned models did not load" in ask(api, "where was the spouse of [anna] born")["note"]
    refused = api.post("/v1/query", json={"question": "who is [anna]", "kb": KB, "reasoner": "learned"})
    assert_problem(refused, 503, f"the active learned models of kb '{KB}' did not load (reasoner {broken}")
    assert api.post(f"/v1/models/{original}/activate").status_code == 200
    wait_served(original)

    assert_problem(api.post("/v1/models/no-such-version/activate"), 404, "no model version 'no-such-version'")
    assert_problem(client_with("query").get("/v1/models"), 403, "'admin' scope")
    assert_problem(api.get("/v1/models", params={"kind": "oracle"}), 422, "kind")
