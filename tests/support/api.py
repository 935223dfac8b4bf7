"""Talking to the live test platform: facts in, waiting for their checks, questions, problem answers,
the ``factloom`` command, and an admin sign-in on an in-process client."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import Any

import httpx

from factloom.config import Settings
from factloom.ledger import Database, FactSubmission

MOVIES = [
    ("Blade Runner", "directed_by", "Ridley Scott"),
    ("Blade Runner", "starred_actors", "Harrison Ford"),
    ("Blade Runner", "release_year", "1982"),
    ("Alien", "directed_by", "Ridley Scott"),
    ("Alien", "release_year", "1979"),
    ("Witness", "starred_actors", "Harrison Ford"),
    ("Witness", "directed_by", "Peter Weir"),
]


def facts(rows: list[tuple[str, str, str]], source: str = "wikimovies") -> list[dict[str, Any]]:
    return [{"subject": s, "predicate": p, "object": o, "source": source} for s, p, o in rows]


def wait_batch(api: httpx.Client, batch_id: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = api.get(f"/v1/batches/{batch_id}").json()
        if body["status"] == "done" and body["counts"]["accepted"] == 0 and body["counts"]["reviewed"] == 0:
            return body
        assert time.monotonic() < deadline, f"batch {batch_id} still {body}"
        time.sleep(0.3)


def wait_status(api: httpx.Client, submission_id: str, status: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = api.get(f"/v1/facts/{submission_id}").json()
        if body["status"] == status:
            return body
        assert time.monotonic() < deadline, f"submission {submission_id} still {body['status']}"
        time.sleep(0.3)


def submission_ids(db: Database, batch_id: str) -> list[str]:
    with db.session() as session:
        rows = session.query(FactSubmission).filter_by(batch_id=batch_id).order_by(FactSubmission.created_at)
        return [r.id for r in rows]


def ask(api: httpx.Client, kb: str, question: str) -> list[dict[str, Any]]:
    response = api.post("/v1/query", json={"question": question, "kb": kb, "top_k": 5})
    assert response.status_code == 200, response.text
    return response.json()["answers"]  # type: ignore[no-any-return]


def assert_problem(response: httpx.Response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and fragment in body["detail"], body


def factloom(*args: str, key: str | None = None, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """Run the ``factloom`` command as a user would, with ``key`` as its API key."""
    env = {**os.environ, **env_vars}
    if key:
        env["FACTLOOM_API_KEY"] = key
    return subprocess.run([sys.executable, "-m", "factloom.platform.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def post(api: httpx.Client, kb: str, rows: list[dict[str, Any]]) -> str:
    """POST the rows to ``kb``; the batch id of the 202 answer."""
    response = api.post("/v1/facts", json={"kb": kb, "facts": rows})
    assert response.status_code == 202, response.text
    return str(response.json()["batch_id"])


def checked(api: httpx.Client, sid: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = api.get(f"/v1/facts/{sid}").json()
        if body["status"] not in ("pending", "checking"):
            return body
        assert time.monotonic() < deadline, f"{sid} still {body['status']}"
        time.sleep(0.3)


def checked_with(api: httpx.Client, db: Database, row: tuple[str, str, str], key: str, verifier: str,
                 version: str, settings: Settings, kb: str) -> dict[str, Any]:
    """Submit fresh copies of a claim until one is checked with ``version`` (the registry is re-read
    every ``registry_refresh_s``); fails when that takes longer than two refresh periods."""
    deadline = time.monotonic() + 2 * settings.registry_refresh_s + 30
    attempt = 0
    while True:
        attempt += 1
        rows = [{**facts([row], source="probe")[0], "key": f"{key}-{attempt}"}]
        (sid,) = submission_ids(db, post(api, kb, rows))
        item = checked(api, sid)
        found = next((c for c in item["checks"] if c["verifier"] == verifier), None)
        if found and found["model_version"] == version:
            # one worker process has it; every other one re-reads the registry within a refresh period
            time.sleep(settings.registry_refresh_s + 1.0)
            return item
        assert time.monotonic() < deadline, f"the worker still checks with {found}"
        time.sleep(1.0)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def admin_sign_in(client: httpx.Client, name: str, password: str, page: str = "/admin/queue") -> str:
    """Sign in to the admin UI (the live API's or an in-process TestClient); the CSRF token of ``page``
    as that person."""
    client.cookies.clear()
    response = client.post("/admin/login", data={"name": name, "password": password,
                                                  "csrf": csrf_of(client.get("/admin/login").text),
                                                  "next": page}, follow_redirects=False)
    assert response.status_code == 303, response.text
    answer = client.get(page)
    assert answer.status_code == 200
    return csrf_of(answer.text)
