"""The users ``factloom bench load`` runs with Locust (one ``locust --headless`` process a level).

Configured through the environment by bench/load.py: ``FACTLOOM_LOAD_KEY`` (an API key),
``FACTLOOM_LOAD_QUESTIONS`` (a file of questions, one a line), ``FACTLOOM_LOAD_QUERY_KB``,
``FACTLOOM_LOAD_INGEST_KB``, ``FACTLOOM_LOAD_BATCH`` (facts a POST), ``FACTLOOM_LOAD_USERS``
(``QueryUser=32,IngestUser=4``: how many of each), ``FACTLOOM_LOAD_INGEST_POSTS`` (POSTs in all, shared
by the ingest users, then they stop; 0: no end), ``FACTLOOM_LOAD_INGEST_PAUSE_S`` (each ingest user's
pause between POSTs), ``FACTLOOM_LOAD_QUIT_AFTER_INGEST`` (end the run when the POSTs are done).

A refusal the platform means (429 or 503 with ``Retry-After``) is not an error: it is recorded under
its own name (``NAME:shed:WHY``, WHY read from the problem's detail: the key's rate limit, the kb's check
backlog, the query API at capacity, a store unavailable) and the user waits as told, as
factloom.client does. Anything else that is not a 2xx is a failure.
"""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path

import gevent
from locust import FastHttpUser, between, constant, events, task
from locust.exception import StopUser

KEY = os.environ.get("FACTLOOM_LOAD_KEY", "")
_QUESTIONS_FILE = os.environ.get("FACTLOOM_LOAD_QUESTIONS")
QUESTIONS = [q for q in Path(_QUESTIONS_FILE).read_text(encoding="utf-8").splitlines() if q] if _QUESTIONS_FILE else []
QUERY_KB = os.environ.get("FACTLOOM_LOAD_QUERY_KB", "default")
INGEST_KB = os.environ.get("FACTLOOM_LOAD_INGEST_KB", "bench-load")
BATCH = int(os.environ.get("FACTLOOM_LOAD_BATCH", "100"))
HEADERS = {"Authorization": f"Bearer {KEY}"}
INGEST_POSTS = int(os.environ.get("FACTLOOM_LOAD_INGEST_POSTS", "0"))
INGEST_PAUSE_S = float(os.environ.get("FACTLOOM_LOAD_INGEST_PAUSE_S", "0"))
QUIT_AFTER_INGEST = os.environ.get("FACTLOOM_LOAD_QUIT_AFTER_INGEST") == "1"
_posted = 0


class _PlatformUser(FastHttpUser):
    abstract = True
    wait_time = between(0.0, 0.01)

    def _post(self, path: str, name: str, body: dict) -> None:  # type: ignore[type-arg]
        with self.client.post(path, json=body, headers=HEADERS, name=name, catch_response=True) as response:
            retry_after = response.headers.get("Retry-After") if response.headers else None
            if response.status_code in (429, 503) and retry_after:
                response.success()  # counted below as shed, not as a served request
                self.environment.events.request.fire(
                    request_type="SHED", name=f"{name}:shed:{_why(response.text)}",
                    response_time=response.request_meta["response_time"],
                    response_length=0, exception=None, context={})
                gevent.sleep(float(retry_after))
            elif not 200 <= response.status_code < 300:
                response.failure(f"{response.status_code}: {(response.text or '')[:200]}")


def _why(problem: str | None) -> str:
    """Which of the platform's limits refused a request, from its problem+json detail."""
    detail = (problem or "").lower()
    for phrase, why in (("rate limit", "key-rate-limit"), ("waiting for their check", "check-backlog"),
                        ("at capacity", "query-capacity"), ("unavailable", "store-unavailable")):
        if phrase in detail:
            return why
    return "other"


class QueryUser(_PlatformUser):
    @task
    def ask(self) -> None:
        self._post("/v1/query", "query", {"question": random.choice(QUESTIONS), "kb": QUERY_KB, "top_k": 5})


class IngestUser(_PlatformUser):
    wait_time = constant(INGEST_PAUSE_S) if INGEST_PAUSE_S else between(0.0, 0.01)

    @task
    def submit(self) -> None:
        global _posted
        if INGEST_POSTS and _posted >= INGEST_POSTS:
            raise StopUser()
        _posted += 1
        run = uuid.uuid4().hex[:10]
        facts = [{"subject": f"Load item {run}-{i}", "predicate": "made_by",
                  "object": f"Load maker {random.randrange(500)}", "source": "bench-load"} for i in range(BATCH)]
        self._post("/v1/facts", "ingest", {"kb": INGEST_KB, "facts": facts})


@events.test_start.add_listener
def _quit_when_the_posts_are_done(environment, **_kwargs) -> None:  # type: ignore[no-untyped-def]
    """End the run once every ingest user has stopped (its last answer in), not at the time limit."""
    if not QUIT_AFTER_INGEST:
        return

    def watch() -> None:
        gevent.sleep(1.0)
        while environment.runner.user_count:
            gevent.sleep(0.2)
        environment.runner.quit()

    gevent.spawn(watch)


for _name, _count in (item.split("=") for item in os.environ.get("FACTLOOM_LOAD_USERS", "").split(",") if item):
    globals()[_name].fixed_count = int(_count)
