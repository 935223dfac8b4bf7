"""API keys on the live platform: list, revoke, rotate, expiry, kb scope on every route, the audit
trail, and the ``factloom keys`` commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from factloom.config import Settings
from factloom.ledger import ApiKey, AuditEvent, Database, FactSubmission, register_version
from factloom.platform.auth.service import KEY_TTL_S, KeyCache, Principal, create_key

pytestmark = pytest.mark.integration

MINE, THEIRS = "keys-mine", "keys-theirs"
QUERY = {"name": "x", "scopes": ["query"]}
KEY_ID = re.compile(r"\(key ([0-9a-f]{32}) ")
FACT = {"subject": "Heat", "predicate": "directed_by", "object": "Michael Mann", "source": "keys-test"}


def assert_problem(response: httpx.Response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert fragment in response.json()["detail"], response.json()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def audit(db: Database, target: str) -> list[AuditEvent]:
    with db.session() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.target == target).order_by(AuditEvent.id)))


def wait_done(client: httpx.Client, batch_id: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = client.get(f"/v1/batches/{batch_id}").json()
        if body["status"] == "done" and body["counts"]["accepted"] == body["counts"]["reviewed"] == 0:
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.3)


def first_submission(db: Database, batch_id: str) -> str:
    with db.session() as session:
        return str(session.scalar(select(FactSubmission.id).where(FactSubmission.batch_id == batch_id)))


# --- the cache, alone ---

def test_the_key_cache_is_bounded_least_recently_used_and_never_outlives_a_key() -> None:
    cache = KeyCache(ttl=60, size=2)
    who = Principal(key_id="k1", name="reader", scopes=frozenset({"query"}))
    cache.put("fl_a_1", who)
    cache.put("fl_b_1", Principal(key_id="k2", name="b", scopes=frozenset({"query"})))
    assert cache.get("fl_a_1") == who  # a is now the most recently used
    cache.put("fl_c_1", who)
    assert cache.get("fl_b_1") is None and cache.get("fl_a_1") == who and len(cache) == 2
    cache.forget("k1")
    assert len(cache) == 0
    soon = Principal(key_id="k3", name="s", scopes=frozenset({"query"}),
                     expires_at=datetime.now(UTC) + timedelta(seconds=0.3))
    cache.put("fl_d_1", soon)
    assert cache.get("fl_d_1") == soon
    time.sleep(0.35)
    assert cache.get("fl_d_1") is None  # its key expired before the cache's TTL ran out
    cache.put("fl_e_1", Principal(key_id="k4", name="e", scopes=frozenset(), expires_at=datetime.now(UTC)))
    assert cache.get("fl_e_1") is None


# --- the routes ---

def test_keys_are_listed_without_secrets_revoked_and_rotated_with_audit(
    api: httpx.Client, anonymous: httpx.Client, db: Database,
) -> None:
    made = api.post("/v1/keys", json={"name": "pipeline-a", "scopes": ["ingest", "query"], "kbs": [MINE, MINE],
                                      "expires_in_days": 30})
    assert made.status_code == 201, made.text
    key = made.json()
    assert key["key"].startswith(f"fl_{key['prefix']}_") and key["kbs"] == [MINE] and key["revoked_at"] is None
    expires = datetime.fromisoformat(key["expires_at"])
    assert timedelta(days=29.9) < expires - datetime.now(UTC) < timedelta(days=30.1)
    assert anonymous.get(f"/v1/review?kb={MINE}", headers=bearer(key["key"])).status_code == 403  # no review scope

    listed = api.get("/v1/keys")
    assert listed.status_code == 200
    mine = next(k for k in listed.json()["items"] if k["id"] == key["id"])
    assert mine == {k: v for k, v in key.items() if k != "key"}
    assert key["key"] not in listed.text and "hash" not in listed.text

    rotated = api.post(f"/v1/keys/{key['id']}/rotate")
    assert rotated.status_code == 201, rotated.text
    new = rotated.json()
    assert new["id"] != key["id"] and new["key"] != key["key"]
    assert (new["name"], new["scopes"], new["kbs"], new["expires_at"]) == (
        key["name"], key["scopes"], key["kbs"], key["expires_at"])
    assert anonymous.get(f"/v1/batches/none?kb={MINE}", headers=bearer(new["key"])).status_code == 404
    assert_problem(api.post(f"/v1/keys/{key['id']}/rotate"), 409, "revoked")

    revoked = api.post(f"/v1/keys/{new['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert api.post(f"/v1/keys/{new['id']}/revoke").json()["revoked_at"] == revoked.json()["revoked_at"]
    ids = {k["id"] for k in api.get("/v1/keys").json()["items"]}
    assert key["id"] not in ids and new["id"] not in ids
    every = {k["id"]: k for k in api.get("/v1/keys", params={"include_revoked": True}).json()["items"]}
    assert every[key["id"]]["revoked_at"] and every[new["id"]]["revoked_at"]
    assert_problem(api.post("/v1/keys/nosuchkey/revoke"), 404, "no API key")
    assert_problem(api.post("/v1/keys/nosuchkey/rotate"), 404, "no API key")

    actions = [(e.action, e.details and e.details.get("new_key")) for e in audit(db, f"key:{key['id']}")]
    assert actions == [("key.create", None), ("key.rotate", new["id"])]
    assert [e.action for e in audit(db, f"key:{new['id']}")] == ["key.revoke"]  # revoked once, not twice
    admin_id = api.get("/v1/keys").json()["items"]  # the calling key is named by name and id
    actor = audit(db, f"key:{new['id']}")[0].actor
    assert actor.startswith("key:test-admin#") and actor.split("#")[1] in {k["id"] for k in admin_id}


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({**QUERY, "colour": "red"}, 422, "colour"),
        ({**QUERY, "kbs": []}, 422, "kbs"),
        ({**QUERY, "kbs": ["no spaces"]}, 422, "kbs.0"),
        ({**QUERY, "expires_in_days": 0}, 422, "expires_in_days"),
        ({**QUERY, "expires_in_days": 1, "expires_at": "2999-01-01T00:00:00Z"}, 422, "not both"),
        ({**QUERY, "expires_at": "2999-01-01T00:00:00"}, 422, "time zone"),
        ({**QUERY, "expires_at": "2001-01-01T00:00:00Z"}, 400, "in the past"),
        ({**QUERY, "expires_at": "9999-12-31T23:59:59-14:00"}, 422, "out of range"),
        ({**QUERY, "scopes": ["root"]}, 400, "unknown scope(s) root"),
    ],
)
def test_bad_key_requests_are_refused_and_write_nothing(
    api: httpx.Client, db: Database, body: dict[str, Any], status: int, fragment: str,
) -> None:
    with db.session() as session:
        before = len(session.scalars(select(ApiKey.id)).all())
    assert_problem(api.post("/v1/keys", json=body), status, fragment)
    with db.session() as session:
        assert len(session.scalars(select(ApiKey.id)).all()) == before


def test_rotate_refuses_unknown_fields(api: httpx.Client) -> None:
    key = api.post("/v1/keys", json={"name": "r", "scopes": ["query"]}).json()
    assert_problem(api.post(f"/v1/keys/{key['id']}/rotate", json={"expires_in_days": 1, "x": 1}), 422, "x")
    later = api.post(f"/v1/keys/{key['id']}/rotate", json={"expires_in_days": 2})
    assert later.status_code == 201 and later.json()["expires_at"] is not None


def test_a_revoked_key_is_refused_within_the_cache_ttl(api: httpx.Client, anonymous: httpx.Client) -> None:
    key = api.post("/v1/keys", json={"name": "soon-revoked", "scopes": ["review"]}).json()
    for _ in range(6):  # both API processes verify the key and keep it
        assert anonymous.get("/v1/review", headers=bearer(key["key"])).status_code == 200
    assert api.post(f"/v1/keys/{key['id']}/revoke").status_code == 200
    time.sleep(KEY_TTL_S + 0.3)
    for _ in range(6):
        assert_problem(anonymous.get("/v1/review", headers=bearer(key["key"])), 401, "unknown or revoked")


def test_an_expired_key_is_refused(api: httpx.Client, anonymous: httpx.Client) -> None:
    key = api.post("/v1/keys", json={"name": "brief", "scopes": ["review"], "expires_in_days": 2 / 86400}).json()
    assert anonymous.get("/v1/review", headers=bearer(key["key"])).status_code == 200
    time.sleep(max(0.0, (datetime.fromisoformat(key["expires_at"]) - datetime.now(UTC)).total_seconds()) + 0.2)
    # the cache keeps a key no longer than it lives: no wait for its TTL here
    assert_problem(anonymous.get("/v1/review", headers=bearer(key["key"])), 401, "expired")
    assert_problem(api.post(f"/v1/keys/{key['id']}/rotate"), 409, "expired")


def test_a_kb_limited_key_reaches_its_kbs_only_on_every_route(
    api: httpx.Client, anonymous: httpx.Client, db: Database, tmp_path: Path,
) -> None:
    made = api.post("/v1/keys", json={"name": "kb-limited", "scopes": ["admin"], "kbs": [MINE]}).json()
    with httpx.Client(base_url=str(api.base_url), headers=bearer(made["key"]), timeout=60) as scoped:
        # what the key may touch: its own kb, end to end
        accepted = scoped.post("/v1/facts", json={"kb": MINE, "facts": [FACT]})
        assert accepted.status_code == 202, accepted.text
        mine_batch = accepted.json()["batch_id"]
        assert wait_done(scoped, mine_batch)["counts"]["committed"] == 1
        mine_fact = first_submission(db, mine_batch)
        assert scoped.get(f"/v1/facts/{mine_fact}").status_code == 200
        assert scoped.post("/v1/query", json={"kb": MINE, "question": "who directed [Heat]"}).status_code == 200
        assert scoped.get("/v1/review", params={"kb": MINE, "status": "committed"}).json()["total"] == 1
        assert_problem(scoped.post(f"/v1/review/{mine_fact}", json={"decision": "accept"}), 409, "not waiting")
        item = {"question": "who directed [Heat]", "answer": "Michael Mann", "correct": True}
        assert scoped.post("/v1/feedback", json={"kb": MINE, "items": [item]}).status_code == 201
        assert scoped.get("/v1/feedback", params={"kb": MINE}).status_code == 200
        assert scoped.get("/v1/models/learn", params={"kb": MINE}).status_code == 200
        gone = tmp_path / "never-saved.pt"
        mine_version = register_version(db, kind="scorer", kb=MINE, artefact=gone, metrics={}, activate=False)
        assert_problem(scoped.post(f"/v1/models/{mine_version}/activate"), 409, "is gone")

        # what another kb holds, made by a key for every kb
        theirs = api.post("/v1/facts", json={"kb": THEIRS, "facts": [FACT]}).json()["batch_id"]
        wait_done(api, theirs)
        their_fact = first_submission(db, theirs)
        their_version = register_version(db, kind="scorer", kb=THEIRS, artefact=gone, metrics={}, activate=False)
        api.post("/v1/feedback", json={"kb": THEIRS, "items": [item]})
        refused = [
            scoped.post("/v1/facts", json={"kb": THEIRS, "facts": [FACT]}),
            scoped.get(f"/v1/batches/{theirs}"),
            scoped.get(f"/v1/facts/{their_fact}"),
            scoped.post("/v1/query", json={"kb": THEIRS, "question": "who directed [Heat]"}),
            scoped.post("/v1/query", json={"question": "who directed [Heat]"}),  # the default kb
            scoped.get("/v1/review", params={"kb": THEIRS}),
            scoped.post(f"/v1/review/{their_fact}", json={"decision": "reject"}),
            scoped.post("/v1/feedback", json={"kb": THEIRS, "items": [item]}),
            scoped.get("/v1/feedback", params={"kb": THEIRS}),
            scoped.get("/v1/models", params={"kb": THEIRS}),
            scoped.get("/v1/models/learn", params={"kb": THEIRS}),
            scoped.post("/v1/models/learn", json={"kb": THEIRS, "kind": "scorer"}),
            scoped.post(f"/v1/models/{their_version}/activate"),
        ]
        for response in refused:
            assert_problem(response, 403, f"limited to kb(s) {MINE}")
        # a key limited to some kbs manages no keys: it could make one wider than itself
        for response in (scoped.get("/v1/keys"), scoped.post("/v1/keys", json={"name": "x", "scopes": ["query"]}),
                         scoped.post(f"/v1/keys/{made['id']}/rotate"), scoped.post(f"/v1/keys/{made['id']}/revoke")):
            assert_problem(response, 403, "needs a key for every kb")

        # listings without a kb show the key's kbs only
        assert {i["kb"] for i in scoped.get("/v1/review", params={"status": "committed"}).json()["items"]} == {MINE}
        assert {i["kb"] for i in scoped.get("/v1/feedback").json()["items"]} == {MINE}
        assert {i["kb"] for i in scoped.get("/v1/models").json()["items"]} == {MINE}
        for kb in (MINE, THEIRS):  # while a key for every kb sees both
            assert api.get("/v1/review", params={"status": "committed", "kb": kb}).json()["total"] >= 1

    with db.session() as session:  # the refused write wrote nothing, the refused decision changed nothing
        assert session.get(FactSubmission, their_fact).status.value == "committed"  # type: ignore[union-attr]
        batches = session.scalars(select(FactSubmission.batch_id).where(FactSubmission.kb == THEIRS)).all()
        assert set(batches) == {theirs}


# --- the command line ---

def factloom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "factloom.platform.cli", *args], env=dict(os.environ),
                          capture_output=True, text=True, timeout=120)


def test_keys_from_the_command_line(live: object, db: Database, settings: Settings, anonymous: httpx.Client) -> None:
    made = factloom("keys", "create", "--scopes", "review", "--name", "cli-keys", "--kbs", f"{MINE},other",
                    "--expires-days", "7")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("fl_") and "shown once" in made.stderr and f"{MINE},other" in made.stderr
    key_id = KEY_ID.search(made.stderr).group(1)  # type: ignore[union-attr]
    assert anonymous.get("/v1/review", params={"kb": MINE}, headers=bearer(token)).status_code == 200
    assert anonymous.get("/v1/review", params={"kb": THEIRS}, headers=bearer(token)).status_code == 403

    listed = factloom("keys", "list")
    assert listed.returncode == 0 and key_id in listed.stdout and token not in listed.stdout + listed.stderr
    line = next(s for s in listed.stdout.splitlines() if key_id in s)
    assert "cli-keys" in line and "scopes review" in line and "expires" in line

    rotated = factloom("keys", "rotate", key_id)
    assert rotated.returncode == 0, rotated.stderr
    new_token = rotated.stdout.strip()
    new_id = KEY_ID.search(rotated.stderr).group(1)  # type: ignore[union-attr]
    assert new_token != token and new_id != key_id
    assert key_id not in factloom("keys", "list").stdout and key_id in factloom("keys", "list", "--all").stdout

    revoked = factloom("keys", "revoke", new_id)
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    time.sleep(KEY_TTL_S + 0.3)
    for old in (token, new_token):
        assert anonymous.get("/v1/review", params={"kb": MINE}, headers=bearer(old)).status_code == 401
    actors = {e.actor for e in audit(db, f"key:{key_id}") + audit(db, f"key:{new_id}")}
    assert len(actors) == 1 and actors.pop().startswith("cli:")

    for bad, message in ((["revoke", "nosuchkey"], "no API key"), (["create", "--scopes", "query", "--kbs", "a b"],
                                                                   "not a kb name"),
                         (["create", "--scopes", "query", "--expires-days", "0"], "at most")):
        refused = factloom("keys", *bad)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr


def test_keys_made_in_process_are_audited_as_system(db: Database) -> None:
    _, principal = create_key(db=db, name="in-process", scopes=["query"])
    (event,) = audit(db, f"key:{principal.key_id}")
    assert (event.action, event.actor, event.details) == (
        "key.create", "system", {"name": "in-process", "scopes": ["query"], "kbs": None, "expires_at": None})


def test_creating_a_key_with_a_kb_limited_admin_key_cannot_widen_it(client_with: Callable[[str], httpx.Client]) -> None:
    # an admin key for every kb may make kb-limited keys of any scope
    admin = client_with("admin")
    made = admin.post("/v1/keys", json={"name": "narrow", "scopes": ["admin"], "kbs": [MINE]})
    assert made.status_code == 201 and made.json()["kbs"] == [MINE]


def test_the_python_client_creates_lists_rotates_and_revokes_keys(
    db: Database, settings: Settings, anonymous: httpx.Client
) -> None:
    from factloom.client import ApiError, Client

    token, _ = create_key(db=db, name="client-admin", scopes=["admin"])
    with Client(settings.base_url, token, retries=0) as admin:
        made = admin.create_key("client-made", ["query"], kbs=[MINE], expires_in_days=1)
        assert made["kbs"] == [MINE] and made["expires_at"] and made["key"].startswith("fl_")
        assert made["id"] in {k["id"] for k in admin.list_keys()}
        rotated = admin.rotate_key(made["id"])
        assert rotated["id"] != made["id"] and rotated["kbs"] == [MINE]
        assert anonymous.get("/v1/review", headers=bearer(made["key"])).status_code == 401
        assert admin.revoke_key(rotated["id"])["revoked_at"]
        assert rotated["id"] not in {k["id"] for k in admin.list_keys()}
        with Client(settings.base_url, rotated["key"], retries=0) as revoked, pytest.raises(ApiError) as refused:
            revoked.query("who directed [Heat]", kb=MINE)
        assert refused.value.status == 401
