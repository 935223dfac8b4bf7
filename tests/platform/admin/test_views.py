"""The admin UI's view logic on a real (migrated SQLite) ledger: roles, sessions, filters, keyset pages.

The pages here run in-process (FastAPI's TestClient) against the ledger only; the browser tests in
``test_admin_browser.py`` drive the whole platform.
"""

from __future__ import annotations

import re
import statistics
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert

from factloom.config import Settings
from factloom.ledger import Database, FactSubmission, IngestBatch, ReviewDecision, Status
from factloom.platform.admin import groups
from factloom.platform.admin import queue as q
from factloom.platform.admin.auth import role_allows
from factloom.platform.admin.routes_auth import safe_next
from factloom.platform.admin.security import SESSION_COOKIE, new_session, session_data, sign, unsign
from factloom.platform.admin.users import create_user
from factloom.platform.errors import Conflict
from factloom.platform.migrate import migrate_sql
from tests.support.api import admin_sign_in

# ---------------------------------------------------------------- pure logic


def test_roles_admin_may_all_reviewer_only_review() -> None:
    assert role_allows("admin", "admin") and role_allows("admin", "reviewer")
    assert role_allows("reviewer", "reviewer") and not role_allows("reviewer", "admin")
    assert not role_allows("root", "reviewer") and not role_allows("", "reviewer")


def test_session_cookie_is_tamper_evident_and_expires() -> None:
    key = b"k" * 32
    value = sign(key, new_session("u1", hours=1, now=1000.0))
    assert session_data(unsign(key, value, now=1001.0)).sign_in_id == "u1"  # type: ignore[union-attr]
    assert unsign(key, value, now=1000.0 + 3601) is None  # expired
    assert unsign(b"other-key" * 4, value, now=1001.0) is None  # another server's key
    body, mac = value.split(".")
    forged = sign(b"x", {"uid": "admin", "csrf": "c", "exp": 9e9}).split(".")[0] + "." + mac
    assert unsign(key, forged, now=1001.0) is None
    assert unsign(key, "garbage", now=1001.0) is None and unsign(key, None) is None


def test_safe_next_stays_inside_the_admin_ui() -> None:
    assert safe_next("/admin/review/abc?kb=x") == "/admin/review/abc?kb=x"
    for bad in ("https://evil.example/admin/x", "//evil.example/admin/", "/v1/facts", "/admin/login", "",
                "/admin\\..\\x", "javascript:alert(1)"):
        assert safe_next(bad) == "/admin/queue", bad


def test_filters_parse_explain_and_round_trip() -> None:
    filters, errors = q.parse_filters({"predicate": " release_year ", "p_min": "0.8", "p_max": "0.2",
                                       "age": "forever", "sort": "p_desc"})
    assert (filters.predicate, filters.p_min, filters.p_max, filters.age, filters.sort) == (
        "release_year", 0.2, 0.8, "any", "p_desc")
    assert len(errors) == 2 and "swapped" in errors[0] and "age" in errors[1]
    again, none = q.parse_filters(dict(re.findall(r"([^&=]+)=([^&]*)", filters.query())))
    assert again == filters and none == []
    bad, errors = q.parse_filters({"p_min": "lots", "p_max": "1.5", "sort": "random"})
    assert bad.p_min is None and bad.p_max is None and bad.sort == "oldest" and len(errors) == 3
    assert not q.QueueFilters().active and q.QueueFilters(source="blog").active


def test_cursor_round_trip_and_foreign_cursors_are_ignored() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert q.decode_cursor(q.encode_cursor("oldest", at, "id1"), "oldest") == (at, "id1")
    naive = datetime(2026, 1, 2, 3, 4, 5)  # as SQLite hands it back: UTC without the zone
    assert q.decode_cursor(q.encode_cursor("oldest", naive, "id1"), "oldest") == (at, "id1")
    assert q.decode_cursor(q.encode_cursor("p_asc", 0.25, "id2"), "p_asc") == (0.25, "id2")
    assert q.decode_cursor(q.encode_cursor("p_asc", 0.25, "id2"), "oldest") is None  # made for another sort
    for junk in ("", "!!!", "bm90IGpzb24", q.encode_cursor("oldest", "not a date", "x")):
        assert q.decode_cursor(junk, "oldest") is None


# ---------------------------------------------------------------- a ledger with a big queue

N = 10_000


def _fill(url: str, n: int) -> Database:
    migrate_sql(url)
    db = Database(url)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with db.session() as session:
        session.add(IngestBatch(id="b" * 32, kb="big", count=n))
        session.add(IngestBatch(id="c" * 32, kb="big", count=5))
        session.flush()
        rows = [
            {"id": f"{i:032x}", "batch_id": "b" * 32 if i % 7 else "c" * 32, "kb": "big", "key": f"k{i}",
             "fact_id": f"f{i}", "subject": f"Film {i}", "predicate": "release_year" if i % 3 else "directed_by",
             "object": str(1900 + i % 120), "source": "blog" if i % 2 else "imdb",
             # ties on purpose: ten rows per timestamp, probabilities on a coarse grid, some abstained
             "created_at": start + timedelta(seconds=i // 10),
             "updated_at": start, "probability": None if i % 97 == 0 else round((i * 37 % 100) / 100, 2),
             "status": Status.needs_review if i % 50 else Status.committed, "attempts": 1}
            for i in range(n)
        ]
        session.execute(insert(FactSubmission), rows)
    return db


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Database:
    return _fill(f"sqlite:///{tmp_path_factory.mktemp('admin') / 'ledger.db'}", N)


def _walk(db: Database, filters: q.QueueFilters, limit: int) -> tuple[list[str], list[float]]:
    ids: list[str] = []
    seconds: list[float] = []
    after = None
    while True:
        t0 = time.perf_counter()
        page = q.list_queue(db=db, filters=filters, limit=limit, after=after,
                            now=datetime(2026, 1, 2, tzinfo=timezone.utc))
        seconds.append(time.perf_counter() - t0)
        ids += [r.id for r in page.rows]
        if page.next_cursor is None:
            return ids, seconds
        after = page.next_cursor


def _expected(db: Database, filters: q.QueueFilters) -> list[str]:
    with db.session() as session:
        rows = session.query(FactSubmission).filter(FactSubmission.status == Status.needs_review)
        if filters.predicate:
            rows = rows.filter(FactSubmission.predicate == filters.predicate)
        if filters.source:
            rows = rows.filter(FactSubmission.source == filters.source)
        items = [(r.created_at, -1.0 if r.probability is None else r.probability, r.id) for r in rows]
    if filters.sort in ("oldest", "newest"):
        items.sort(key=lambda t: (t[0], t[2]), reverse=filters.sort == "newest")
    else:
        items.sort(key=lambda t: (t[1], t[2]), reverse=filters.sort == "p_desc")
    return [t[2] for t in items]


@pytest.mark.parametrize("sort", list(q.SORTS))
def test_keyset_pages_cover_the_queue_once_in_order(ledger: Database, sort: str) -> None:
    filters = q.QueueFilters(kb="big", sort=sort)
    ids, seconds = _walk(ledger, filters, limit=200)
    expected = _expected(ledger, filters)
    assert len(expected) == N - N // 50
    assert ids == expected  # no row lost or repeated across 49 page boundaries, ties included
    # a deep page costs what the first does (keyset, not OFFSET): compare the last pages with the first ones
    first, last = statistics.median(seconds[:5]), statistics.median(seconds[-5:])
    print(f"\nqueue sort={sort}: {len(seconds)} pages of 200 over {len(ids)} rows, "
          f"first pages {first * 1000:.1f} ms, last pages {last * 1000:.1f} ms")
    assert last < max(4 * first, 0.05)


@pytest.mark.integration
def test_keyset_pages_on_postgresql(postgres_url: str) -> None:
    db = _fill(postgres_url, 2000)
    try:
        for sort in q.SORTS:
            filters = q.QueueFilters(kb="big", sort=sort)
            ids, _ = _walk(db, filters, limit=75)
            assert ids == _expected(db, filters), sort
        filters = q.QueueFilters(kb="big", source="blog", sort="newest")
        expected = _expected(db, filters)
        prev_id, next_id = q.neighbours(db=db, filters=filters, submission_id=expected[5])
        assert (prev_id, next_id) == (expected[4], expected[6])
    finally:
        db.dispose()


def test_filtered_pages_back_and_forth_and_neighbours(ledger: Database) -> None:
    filters = q.QueueFilters(kb="big", predicate="release_year", source="blog", sort="p_desc")
    expected = _expected(ledger, filters)
    now = datetime(2026, 1, 2, tzinfo=timezone.utc)
    first = q.list_queue(db=ledger, filters=filters, limit=50, now=now)
    second = q.list_queue(db=ledger, filters=filters, limit=50, after=first.next_cursor, now=now)
    back = q.list_queue(db=ledger, filters=filters, limit=50, before=second.prev_cursor, now=now)
    assert [r.id for r in first.rows] == expected[:50] and [r.id for r in second.rows] == expected[50:100]
    assert [r.id for r in back.rows] == expected[:50] and back.prev_cursor is None
    assert first.matching == len(expected) and first.prev_cursor is None
    prev_id, next_id = q.neighbours(db=ledger, filters=filters, submission_id=expected[10], now=now)
    assert (prev_id, next_id) == (expected[9], expected[11])
    assert q.neighbours(db=ledger, filters=filters, submission_id=expected[0], now=now)[0] is None
    older = q.list_queue(db=ledger, filters=q.QueueFilters(kb="big", age="1d+"), limit=10, now=now)
    assert older.matching == 0  # every row is younger than a day at ``now``
    facets = q.facets(db=ledger, kb="big")
    assert dict(facets["source"]).keys() == {"blog", "imdb"} and "kb" not in facets  # one kb: no kb facet
    assert dict(q.facets(db=ledger)["kb"])["big"] == len(_expected(ledger, q.QueueFilters(kb="big")))


# ---------------------------------------------------------------- pages in-process (ledger only)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    from factloom.platform.app import create_app

    home: Path = tmp_path_factory.mktemp("admin-home")
    settings = Settings(_env_file=None, home=home, admin_secret="test-secret-" + "x" * 20,  # type: ignore[call-arg]
                        neo4j_uri="bolt://127.0.0.1:9", redis_url="redis://127.0.0.1:9/0")
    migrate_sql(settings.sql_url)
    db = Database(settings.sql_url)
    create_user(db=db, name="rita", role="reviewer", password="reviewer-pass")
    create_user(db=db, name="ada", role="admin", password="admin-pass-1")
    db.dispose()
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as test_client:
        yield test_client


def test_signed_out_pages_redirect_and_api_answers_401(client: TestClient) -> None:
    client.cookies.clear()
    page = client.get("/admin/review/abc?kb=x", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/admin/login?next=%2Fadmin%2Freview%2Fabc%3Fkb%3Dx"
    api = client.get("/admin/api/graph/expand", params={"id": "x"})
    assert api.status_code == 401 and api.headers["content-type"] == "application/problem+json"
    assert client.post("/admin/queue/bulk", data={"decision": "accept"}).status_code == 401


def test_sign_in_needs_the_form_token_and_the_password(client: TestClient) -> None:
    client.cookies.clear()
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/admin/login").text).group(1)  # type: ignore
    wrong = client.post("/admin/login", data={"name": "rita", "password": "nope-nope", "csrf": token})
    assert wrong.status_code == 401 and "wrong password" in wrong.text
    forged = client.post("/admin/login", data={"name": "rita", "password": "reviewer-pass", "csrf": "made-up"})
    assert forged.status_code == 403 and "fl_session" not in forged.cookies


def test_reviewer_is_refused_admin_pages_and_actions(client: TestClient) -> None:
    csrf = admin_sign_in(client, "rita", "reviewer-pass")
    for path in ("/admin/users", "/admin/batches", "/admin/models", "/admin/audit"):
        page = client.get(path)
        assert page.status_code == 403 and "Not allowed" in page.text, path
    create = client.post("/admin/users", data={"name": "eve", "role": "admin", "password": "eve-password",
                                               "csrf": csrf})
    assert create.status_code == 403
    queue = client.get("/admin/queue")
    assert "Batches" not in queue.text and "Review queue" in queue.text


def test_admin_pages_and_csrf_on_every_post(client: TestClient) -> None:
    csrf = admin_sign_in(client, "ada", "admin-pass-1")
    assert client.get("/admin/batches").status_code == 200
    no_token = client.post("/admin/users", data={"name": "bob", "role": "reviewer", "password": "bob-password"})
    assert no_token.status_code == 403 and "Form expired" in no_token.text
    made = client.post("/admin/users", data={"name": "bob", "role": "reviewer", "password": "bob-password",
                                             "csrf": csrf}, follow_redirects=True)
    assert made.status_code == 200 and "bob" in made.text and "Created reviewer bob" in made.text
    dup = client.post("/admin/users", data={"name": "bob", "role": "reviewer", "password": "bob-password",
                                            "csrf": csrf})
    assert dup.status_code == 409
    off = client.post("/admin/users/bob/disabled", data={"disabled": "yes", "csrf": csrf}, follow_redirects=True)
    assert off.status_code == 200 and "disabled" in off.text
    trail = client.get("/admin/audit")
    assert trail.status_code == 200 and trail.text.index("user.disable") < trail.text.index("user.create")
    assert "user:ada" in trail.text and "user:bob" in trail.text
    only = client.get("/admin/audit", params={"action": "user.disable"})
    assert "user.disable" in only.text and "user.create" not in only.text
    assert "Nothing recorded for this filter" in client.get("/admin/audit", params={"actor": "nobody"}).text
    client.cookies.clear()
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/admin/login").text).group(1)  # type: ignore
    assert client.post("/admin/login", data={"name": "bob", "password": "bob-password", "csrf": token}
                       ).status_code == 401  # disabled accounts cannot sign in


def test_admin_sees_model_versions_and_activates_an_older_one(client: TestClient, tmp_path: Path) -> None:
    from factloom.ledger import list_versions, register_version

    db = client.app.state.resources.db  # type: ignore[attr-defined]
    (tmp_path / "1").write_bytes(b"a scorer")
    older = register_version(db, kind="scorer", kb="views", artefact=tmp_path / "1", metrics={"valid_accuracy": 0.81})
    newer = register_version(db, kind="scorer", kb="views", artefact=tmp_path / "2", metrics={"valid_accuracy": 0.83})
    gates = {"passed": False, "retention": {"metric": "filtered_mrr", "value": 0.3, "parent": 0.4, "threshold": 0.38,
                                            "items": 1000, "passed": False},
             "new_knowledge": {"metric": "filtered_mrr", "value": 0.2, "parent": 0.0, "threshold": 0.0,
                               "items": 100, "passed": True}}
    failed = register_version(db, kind="scorer", kb="views", artefact=tmp_path / "1", metrics={}, parent=newer,
                              gates=gates, activate=False)  # a learner's update that failed its gates
    csrf = admin_sign_in(client, "ada", "admin-pass-1")
    page = client.get("/admin/models", params={"kb": "views"})
    assert page.status_code == 200 and older in page.text and newer in page.text and failed in page.text
    assert "valid accuracy 0.83" in page.text and page.text.count(">Activate</button>") == 2
    assert ">failed<" in page.text and "retention 0.3 ≥ 0.38" in page.text and f"↑ {newer}" in page.text
    forged = client.post(f"/admin/models/{older}/activate", data={"csrf": "made-up"})
    assert forged.status_code == 403
    done = client.post(f"/admin/models/{older}/activate", data={"csrf": csrf}, follow_redirects=True)
    assert done.status_code == 200 and f"{older} is now the active scorer of views" in done.text
    assert {v.id: v.status for v in list_versions(db, kb="views")} == {older: "active", newer: "retired",
                                                                         failed: "candidate"}
    assert client.post("/admin/models/nothing/activate", data={"csrf": csrf}).status_code == 404
    gone = client.post(f"/admin/models/{newer}/activate", data={"csrf": csrf})  # its file was never written
    assert gone.status_code == 409 and "is gone" in gone.text


def test_sign_out_ends_the_session_even_for_a_copied_cookie(client: TestClient) -> None:
    csrf = admin_sign_in(client, "rita", "reviewer-pass")
    copied = client.cookies.get(SESSION_COOKIE)
    assert client.post("/admin/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    assert client.get("/admin/queue", follow_redirects=False).status_code == 303
    client.cookies.set(SESSION_COOKIE, copied, path="/admin")  # replayed: signed, unexpired, but revoked
    assert client.get("/admin/queue", follow_redirects=False).status_code == 303
    refused = client.post("/admin/queue/bulk", data={"decision": "reject", "csrf": csrf})
    assert refused.status_code == 401
    client.cookies.clear()


def test_a_password_change_or_disabling_ends_every_sign_in_of_the_account(client: TestClient) -> None:
    admin_csrf = admin_sign_in(client, "ada", "admin-pass-1")
    admin_cookie = client.cookies.get(SESSION_COOKIE)
    assert client.post("/admin/users", data={"name": "carl", "role": "reviewer", "password": "carl-password",
                                             "csrf": admin_csrf}).status_code in (200, 303)
    admin_sign_in(client, "carl", "carl-password")
    first = client.cookies.get(SESSION_COOKIE)
    admin_sign_in(client, "carl", "carl-password")  # a second browser
    second = client.cookies.get(SESSION_COOKIE)

    def use(cookie: str | None) -> None:
        client.cookies.clear()
        client.cookies.set(SESSION_COOKIE, cookie, path="/admin")

    def works(cookie: str | None) -> bool:
        use(cookie)
        return client.get("/admin/queue", follow_redirects=False).status_code == 200

    assert works(first) and works(second) and works(admin_cookie)
    short = client.post("/admin/users/carl/password", data={"password": "short", "csrf": admin_csrf})
    assert short.status_code == 400 and works(first)  # a refused change ends nothing
    use(admin_cookie)
    changed = client.post("/admin/users/carl/password", data={"password": "carl-new-password", "csrf": admin_csrf},
                          follow_redirects=True)
    assert changed.status_code == 200 and "their sign-ins have ended" in changed.text
    assert not works(first) and not works(second) and works(admin_cookie)
    assert "user.password" in client.get("/admin/audit").text
    admin_sign_in(client, "carl", "carl-new-password")
    third = client.cookies.get(SESSION_COOKIE)
    use(admin_cookie)
    client.post("/admin/users/carl/disabled", data={"disabled": "yes", "csrf": admin_csrf})
    client.post("/admin/users/carl/disabled", data={"disabled": "no", "csrf": admin_csrf})
    assert not works(third)  # re-enabling the account does not bring its old sign-ins back
    client.cookies.clear()


def test_every_admin_answer_carries_the_security_headers(client: TestClient) -> None:
    client.cookies.clear()
    answers = [client.get("/admin/login"), client.get("/admin/queue", follow_redirects=False),
               client.get("/admin/static/admin.css"), client.get("/admin/static/nothing.css"),
               client.get("/admin/vendor/cytoscape.min.js"), client.get("/admin/api/graph/expand")]
    for answer in answers:
        assert answer.headers["referrer-policy"] == "same-origin", answer.url
        assert answer.headers["x-content-type-options"] == "nosniff", answer.url


def test_static_and_vendor_files_are_served_locally(client: TestClient) -> None:
    assert client.get("/admin/static/admin.css").headers["content-type"].startswith("text/css")
    assert client.get("/admin/static/../app.py").status_code == 404
    vendor = client.get("/admin/vendor/cytoscape.min.js")
    assert vendor.status_code == 200 and len(vendor.content) > 100_000  # installed by npm ci in setup.sh
    assert client.get("/admin/vendor/left-pad.js").status_code == 404


# ---------------------------------------------------------------- what the pages draw


def test_verifier_chart_escapes_names_and_greys_abstentions() -> None:
    from factloom.platform.admin.visuals import verifier_chart

    svg = str(verifier_chart([("consistency", 0.5), ("<script>x</script>", None), ("types", 0.95)],
                             accept=0.9, reject=0.1))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert svg.count("abstained") == 1 and ">0.50<" in svg and ">0.95<" in svg and ">—<" in svg
    assert 'class="chart-accept"' in svg and 'class="chart-reject"' in svg


def test_answer_elements_tag_each_edge_with_its_answers() -> None:
    from factloom.platform.admin.visuals import answer_elements
    from factloom.platform.query.schemas import AnswerOut, PathStepOut

    def step(fid: str, s: str, p: str, o: str) -> PathStepOut:
        return PathStepOut(fact_id=fid, subject=s, predicate=p, object=o)

    answers = [
        AnswerOut(entity_id="a", name="Alien", score=1.0, paths=[[step("f1", "Alien", "directed_by", "Ridley Scott")]]),
        AnswerOut(entity_id="b", name="1979", score=0.5, paths=[[step("f1", "Alien", "directed_by", "Ridley Scott"),
                                                                step("f2", "Alien", "release_year", "1979")]]),
    ]
    elements = answer_elements(answers, ["ridley scott"])
    nodes = {e["data"]["label"]: e["classes"] for e in elements if "source" not in e["data"]}
    edges = {e["data"]["id"]: e["data"]["answers"] for e in elements if "source" in e["data"]}
    assert nodes == {"Ridley Scott": "seed", "Alien": "answer", "1979": "answer"}
    assert edges == {"f1": [0, 1], "f2": [1]}


def test_as_of_dates_mean_the_end_of_that_day_in_utc() -> None:
    from factloom.platform.admin.routes_graph import parse_as_of
    from factloom.platform.errors import BadRequest

    assert parse_as_of("") is None
    assert parse_as_of("2020-01-31") == datetime(2020, 1, 31, 23, 59, 59, tzinfo=timezone.utc)
    assert parse_as_of("2020-01-31T10:00:00") == datetime(2020, 1, 31, 10, tzinfo=timezone.utc)
    with pytest.raises(BadRequest):
        parse_as_of("last tuesday")


def test_login_throttle_refuses_after_repeated_failures_then_forgets() -> None:
    from factloom.platform.admin.throttle import LocalThrottle

    now = [0.0]
    throttle = LocalThrottle(attempts=3, window_s=60.0, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.wait_s("Ana") == 0.0
        throttle.failed("ana ")
        now[0] += 1.0
    assert throttle.wait_s("ANA") == pytest.approx(57.0) and throttle.wait_s("bob") == 0.0
    now[0] = 61.0  # the first failure left the window
    assert throttle.wait_s("ana") == 0.0
    throttle.failed("ana")
    throttle.succeeded("ana")
    assert throttle.wait_s("ana") == 0.0


def _waiting(client: TestClient, n: int) -> list[str]:
    """``n`` submissions waiting for review in the in-process app's ledger."""
    db: Database = client.app.state.resources.db  # type: ignore[attr-defined]
    batch = uuid.uuid4().hex
    ids = [uuid.uuid4().hex for _ in range(n)]
    with db.session() as session:
        session.add(IngestBatch(id=batch, kb="ui", count=n))
        session.flush()
        for i, sid in enumerate(ids):
            session.add(FactSubmission(id=sid, batch_id=batch, kb="ui", key=sid, fact_id=sid, subject=f"Film {i}",
                                       predicate="release_year", object="1999", source="blog",
                                       status=Status.needs_review, probability=0.5))
    return ids


def _status(client: TestClient, sid: str) -> Status:
    db: Database = client.app.state.resources.db  # type: ignore[attr-defined]
    with db.session() as session:
        row = session.get(FactSubmission, sid)
        assert row is not None
        return row.status


def test_reject_then_a_late_second_decision_is_a_warning_not_an_error(client: TestClient) -> None:
    csrf = admin_sign_in(client, "rita", "reviewer-pass")
    (sid,) = _waiting(client, 1)
    form = {"decision": "reject", "reason": "wrong film", "csrf": csrf, "back": "kb=ui"}
    done = client.post(f"/admin/review/{sid}/decide", data=form, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/admin/queue?kb=ui"
    assert _status(client, sid) is Status.rejected
    late = client.post(f"/admin/review/{sid}/decide", data=form, follow_redirects=False)
    assert late.status_code == 303 and late.headers["location"] == f"/admin/review/{sid}?kb=ui"
    forged = client.post(f"/admin/review/{sid}/decide", data={**form, "csrf": "nope"})
    assert forged.status_code == 403


def test_bulk_decisions_wait_for_the_confirmation(client: TestClient) -> None:
    csrf = admin_sign_in(client, "rita", "reviewer-pass")
    ids = _waiting(client, 3)
    form = {"ids": ids[:2], "decision": "reject", "reason": "spam source", "csrf": csrf, "back": "kb=ui"}
    confirm = client.post("/admin/queue/bulk", data=form)
    assert confirm.status_code == 200 and "Reject 2 claims?" in confirm.text and "Film 1" in confirm.text
    assert {_status(client, i) for i in ids} == {Status.needs_review}
    done = client.post("/admin/queue/bulk", data={**form, "confirmed": "yes"}, follow_redirects=False)
    assert done.status_code == 303
    assert [_status(client, i) for i in ids] == [Status.rejected, Status.rejected, Status.needs_review]
    queue = client.get("/admin/queue", params={"kb": "ui"})
    assert "Rejected 2 item(s)" in queue.text and ids[2] in queue.text and ids[0] not in queue.text


def test_item_shows_the_stored_evidence_image(client: TestClient) -> None:
    from factloom.ledger.evidence import store_image

    admin_sign_in(client, "rita", "reviewer-pass")
    settings: Settings = client.app.state.resources.settings  # type: ignore[attr-defined]
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    sha = store_image(settings.evidence_dir, png, "image/png")
    with_image, without = _waiting(client, 2)
    db: Database = client.app.state.resources.db  # type: ignore[attr-defined]
    with db.session() as session:
        row = session.get(FactSubmission, with_image)
        assert row is not None
        row.evidence = {"text": "the poster", "image": {"sha256": sha, "content_type": "image/png", "bytes": len(png)}}
    page = client.get(f"/admin/review/{with_image}")
    assert page.status_code == 200 and f'src="/admin/review/{with_image}/image"' in page.text
    image = client.get(f"/admin/review/{with_image}/image")
    assert image.status_code == 200 and image.content == png
    assert image.headers["content-type"] == "image/png" and image.headers["x-content-type-options"] == "nosniff"
    assert client.get(f"/admin/review/{without}/image").status_code == 404
    client.cookies.clear()
    assert client.get(f"/admin/review/{with_image}/image", follow_redirects=False).status_code == 303


def test_bidi_controls_are_shown_not_obeyed_except_in_fields_sent_back() -> None:
    from factloom.platform.admin.render import environment

    page = environment().from_string(
        '<p title="{{ x }}">{{ x }}</p><input value="{{ x|verbatim }}"><script>{{ j|jsonblock }}</script>')
    html = page.render(x="\u202eevil<b>", j={"name": "a\u2066b\u200f"})
    assert "\u202e" not in html.split("<input")[0] and html.count("[U+202E]evil&lt;b&gt;") == 2
    assert 'value="\u202eevil&lt;b&gt;"' in html  # a correction form sends the name back as it is
    assert '{"name": "a[U+2066]b[U+200F]"}' in html


def test_the_queue_says_why_groups_rivals_searches_and_counts_positions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'why.db'}"
    migrate_sql(url)
    db = Database(url)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    claims = [("Blade Runner", "release_year", "1982", "value_clash"), ("Blade Runner", "release_year", "1999",
              "value_clash"), ("Blade Runner", "release_year", "2049", "value_clash"),
              ("Alien", "directed_by", "Alien", "self_loop"), ("100%_Pure", "genre", "Drama", "low_plausibility")]
    with db.session() as session:
        session.add(IngestBatch(id="b" * 32, kb="why", count=len(claims)))
        session.flush()
        session.execute(insert(FactSubmission), [
            {"id": f"{i:032x}", "batch_id": "b" * 32, "kb": "why", "key": f"k{i}", "fact_id": f"f{i}", "subject": s,
             "predicate": p, "object": o, "status": Status.needs_review, "review_reason": why, "attempts": 1,
             "created_at": start + timedelta(minutes=i), "updated_at": start, "probability": 0.5}
            for i, (s, p, o, why) in enumerate(claims)])
    everything = q.QueueFilters(kb="why")
    assert [(g.reason, g.waiting, g.text) for g in groups.reason_groups(db=db, filters=everything)] == [
        ("value_clash", 3, "value clash"), ("low_plausibility", 1, "low plausibility"), ("self_loop", 1, "self-loop")]
    clashes = q.list_queue(db=db, filters=q.QueueFilters(kb="why", reason="value_clash"), limit=2)
    assert [r.why_text for r in clashes.rows] == ["value clash"] * 2 and clashes.position == "1–2 of 3"
    rest = q.list_queue(db=db, filters=q.QueueFilters(kb="why", reason="value_clash"), limit=2,
                        after=clashes.next_cursor)
    assert rest.position == "3–3 of 3" and rest.rows[0].object == "2049"
    rivals, contested = groups.claim_groups(db=db, filters=everything)
    assert contested == 1 and [(g.subject, g.predicate, g.waiting, [v for _, v in g.values]) for g in rivals] == [
        ("Blade Runner", "release_year", 3, ["1982", "1999", "2049"])]
    search = q.list_queue(db=db, filters=q.QueueFilters(kb="why", search="BLADE"), limit=10)
    assert search.matching == 3
    # the LIKE wildcards typed by a person are plain characters
    assert [r.subject for r in q.list_queue(db=db, filters=q.QueueFilters(kb="why", search="0%_p"), limit=10).rows] \
        == ["100%_Pure"]
    assert q.list_queue(db=db, filters=q.QueueFilters(kb="why", search="%"), limit=10).matching == 1
    assert q.list_queue(db=db, filters=q.QueueFilters(kb="why", search="alien"), limit=10).matching == 1
    filters, errors = q.parse_filters({"reason": "gremlins", "group": "claim", "q": " blade ", "subject": "Alien"})
    assert filters.reason == "" and "unknown reason" in errors[0] and filters.group == "claim"
    assert filters.search == "blade" and filters.query(subject="", group="") == "q=blade"


def test_a_decision_can_be_undone_by_its_reviewer_for_a_while_and_reopened_by_an_admin(client: TestClient) -> None:
    from factloom.ledger import AuditEvent, ReviewDecision

    db: Database = client.app.state.resources.db  # type: ignore[attr-defined]
    csrf = admin_sign_in(client, "rita", "reviewer-pass")
    first, second = _waiting(client, 2)
    form = {"decision": "reject", "reason": "wrong film", "csrf": csrf, "back": "kb=ui"}
    page = client.post(f"/admin/review/{first}/decide", data=form, follow_redirects=True)
    assert _status(client, first) is Status.rejected
    notice = re.search(r'<form method="post" action="/admin/review/undo".*?</form>', page.text, re.S)
    assert notice is not None and "Undo" in notice.group()
    start, end = (re.search(rf'name="{k}" value="([^"]+)"', notice.group()).group(1)  # type: ignore[union-attr]
                  for k in ("start", "end"))
    undone = client.post("/admin/review/undo", data={"start": start, "end": end, "csrf": csrf}, follow_redirects=True)
    assert "is back in the queue" in undone.text and _status(client, first) is Status.needs_review
    with db.session() as session:  # the withdrawn decision no longer counts (nor trains the fusion)...
        assert session.query(ReviewDecision).filter_by(submission_id=first).count() == 0
        trail = session.query(AuditEvent).filter_by(target=first, action="review.undo").one()
        assert trail.details["decisions"][0]["reason"] == "wrong film"  # ...the audit trail keeps it whole
    # someone else's decision, or an old one, is not the reviewer's to undo
    client.post(f"/admin/review/{second}/decide", data=form)
    with db.session() as session:
        session.query(ReviewDecision).filter_by(submission_id=second).update(
            {"created_at": datetime.now(timezone.utc) - timedelta(minutes=5)})
    now = time.time()
    late = client.post("/admin/review/undo", data={"start": now - 310, "end": now - 290, "csrf": csrf},
                       follow_redirects=True)
    assert "Nothing to undo" in late.text and _status(client, second) is Status.rejected
    assert client.post(f"/admin/review/{second}/reopen", data={"csrf": csrf}).status_code == 403
    admin_csrf = admin_sign_in(client, "ada", "admin-pass-1")
    item = client.get(f"/admin/review/{second}")
    assert "Reopen for review" in item.text
    reopened = client.post(f"/admin/review/{second}/reopen", data={"csrf": admin_csrf, "reason": "wrong call"},
                           follow_redirects=True)
    assert "Reopened: it was rejected" in reopened.text and _status(client, second) is Status.needs_review
    assert "review.reopen" in client.get("/admin/audit").text
    again = client.post(f"/admin/review/{second}/reopen", data={"csrf": admin_csrf})
    assert again.status_code == 409  # nothing decided to take back
    client.cookies.clear()


def test_batches_page_narrows_every_figure_to_the_kb_and_shows_the_reviewers(client: TestClient) -> None:
    from factloom.platform.admin.batches import queue_age, reviewers, throughput

    db: Database = client.app.state.resources.db  # type: ignore[attr-defined]
    rita = admin_sign_in(client, "rita", "reviewer-pass")
    ids = _waiting(client, 3)  # kb "ui"
    client.post(f"/admin/review/{ids[0]}/decide", data={"decision": "reject", "csrf": rita})
    with db.session() as session:  # another kb with more waiting
        session.add(IngestBatch(id="d" * 32, kb="elsewhere", count=4))
        session.flush()
        for i in range(4):
            session.add(FactSubmission(id=uuid.uuid4().hex, batch_id="d" * 32, kb="elsewhere", key=f"e{i}",
                                       fact_id=f"e{i}", subject=f"E{i}", predicate="p", object="o",
                                       status=Status.needs_review))
    ui, everywhere = throughput(db=db, kb="ui"), throughput(db=db)
    assert everywhere.status_totals["needs_review"] == ui.status_totals["needs_review"] + 4
    admin_sign_in(client, "ada", "admin-pass-1")
    page = client.get("/admin/batches", params={"kb": "ui"}).text
    waiting = re.search(r"<b>(\d+)</b><span>waiting for review", page)
    assert waiting is not None and int(waiting.group(1)) == ui.status_totals["needs_review"]
    assert "elsewhere" not in page.split('id="batches"')[1]  # nor in the table
    chart = page.split('id="minute-chart"')[1].split("</svg>")[0]
    assert "facts / min" in chart and "now" in chart and "−59 min" in chart and 'class="axis"' in chart
    people = {r.reviewer: r for r in reviewers(db=db, kb="ui")}
    assert people["user:rita"].decisions >= 1 and "user:rita" in page.split('id="reviewers"')[1]
    assert queue_age(db=db, kb="elsewhere").waiting == 4
    client.cookies.clear()


def test_models_page_says_what_serves_a_kb_without_learned_models(client: TestClient) -> None:
    admin_sign_in(client, "ada", "admin-pass-1")
    _waiting(client, 1)  # kb "ui": ingested, nothing trained
    page = client.get("/admin/models", params={"kb": "ui"}).text
    serving = page.split('id="serving-now"')[1].split("</section>")[0]
    assert serving.count("baseline</span>") == 4
    assert "pathrank-baseline" in serving and "k-hop expansion" in serving and "plausibility check abstains" in serving
    assert "accept at ≥ 0.9" in serving
    assert "ui" in page.split('id="kb"')[1].split("</select>")[0]  # the kb is offered in the filter too
    client.cookies.clear()


def test_a_kb_that_needs_two_reviewers_carries_out_agreement_and_sends_disagreement_to_an_admin(
    client: TestClient,
) -> None:
    from factloom.platform.review import service

    db: Database = client.app.state.resources.db  # type: ignore[attr-defined]
    agreed, disputed, single = _waiting(client, 3)  # kb "ui"
    two = {"second_opinion_kbs": {"ui"}}

    def decide(sid: str, decision: str, who: str, **extra: object) -> Status:
        return service.decide(db=db, submission_id=sid, decision=decision, reason="", reviewer=who,
                              **{**two, **extra})  # type: ignore[arg-type]

    assert decide(agreed, "reject", "user:ann") is Status.needs_review  # an opinion: it keeps waiting
    with pytest.raises(Conflict, match="already"):
        decide(agreed, "reject", "user:ann")  # one reviewer cannot be both
    assert decide(agreed, "reject", "user:bob") is Status.rejected  # the second agrees: carried out
    assert decide(disputed, "accept", "user:ann") is Status.needs_review
    assert decide(disputed, "reject", "user:bob") is Status.needs_review
    with db.session() as session:
        assert session.get(FactSubmission, disputed).review_reason == "disagreement"  # type: ignore[union-attr]
    with pytest.raises(Conflict, match="an admin decides"):
        decide(disputed, "reject", "user:cy")
    assert decide(disputed, "reject", "user:ada", settles=True) is Status.rejected  # an admin settles it
    alone = service.decide(db=db, submission_id=single, decision="reject", reason="", reviewer="user:ann")
    assert alone is Status.rejected  # where the kb is not listed one decision is enough
    # a first opinion can be undone by its reviewer: the item waits for a first one again
    (fresh,) = _waiting(client, 1)
    decide(fresh, "accept", "user:ann")
    assert service.reopen(db=db, store=None, submission_id=fresh, actor="user:ann",  # type: ignore[arg-type]
                          undo_within_s=30) is Status.needs_review
    with db.session() as session:
        assert session.query(ReviewDecision).filter_by(submission_id=fresh).count() == 0
    assert decide(fresh, "accept", "user:bob") is Status.needs_review  # a first opinion again
