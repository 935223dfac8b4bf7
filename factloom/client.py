"""A small Python client for the FactLoom REST API.

>>> client = Client("http://127.0.0.1:8000", api_key="fl_…")
>>> batch = client.submit([{"subject": "Blade Runner", "predicate": "directed_by", "object": "Ridley Scott"}])
>>> client.query("who directed [Blade Runner]")["answers"][0]["name"]
'Ridley Scott'
>>> client.feedback("who directed [Blade Runner]", "Ridley Scott", correct=True)["count"]
1

A request the server refused for now (429 Too many requests, 503 Service unavailable) is sent again
after the ``Retry-After`` it named, or with exponential backoff, up to ``retries`` times and
``max_wait_s`` seconds in all; so is one that never reached the server (connection refused). One
whose answer was lost on the way back (a read error or timeout) is sent again only where sending it
twice changes nothing: reads, and ``submit`` (the ledger keeps one submission per fact key).
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["Client", "ApiError", "read_facts", "RETRY_STATUSES"]

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 503})  # refused for now, nothing written: try again later


class ApiError(Exception):
    """A problem+json answer from the API."""

    def __init__(self, status: int, problem: dict[str, Any], retry_after: float | None = None) -> None:
        self.status = status
        self.problem = problem
        self.retry_after = retry_after  # seconds, where the server said when to try again
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}")


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), if it has one."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Client:
    """``retries`` and ``max_wait_s`` bound the tries of one call (see the module's docstring);
    ``retries=0`` sends each request once."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 60.0, *, retries: int = 5,
                 max_wait_s: float = 120.0, transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout, headers={"Authorization": f"Bearer {api_key}"},
            transport=transport,
        )
        self.retries = retries
        self.max_wait_s = max_wait_s

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> httpx.Response:
        deadline = time.monotonic() + self.max_wait_s
        attempt = 0
        while True:
            backoff = min(30.0, 0.5 * 2 ** attempt) * random.uniform(0.5, 1.0)  # noqa: S311 - jitter
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                # connection refused: the request never reached the server, safe to send again
                if attempt == self.retries or time.monotonic() + backoff > deadline or not (
                        idempotent or isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)):
                    raise
                wait, reason = backoff, str(exc) or type(exc).__name__
            else:
                told = _retry_after(response)
                wait, reason = (backoff if told is None else told), str(response.status_code)
                if response.status_code not in RETRY_STATUSES or attempt == self.retries or \
                        time.monotonic() + wait > deadline:
                    return response
            log.info("%s %s: %s; trying again in %.1f s", method, path, reason, wait)
            time.sleep(wait)
            attempt += 1

    def _call(self, method: str, path: str, *, idempotent: bool | None = None, **kwargs: Any) -> Any:
        response = self._send(method, path, idempotent=method == "GET" if idempotent is None else idempotent,
                              **kwargs)
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"detail": response.text}
            raise ApiError(response.status_code, problem, _retry_after(response))
        return response.json()

    def submit(self, facts: Sequence[dict[str, Any]], kb: str = "default") -> dict[str, Any]:
        return self._call("POST", "/v1/facts", idempotent=True,
                          json={"kb": kb, "facts": list(facts)})  # type: ignore[no-any-return]

    def batch(self, batch_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/batches/{batch_id}")  # type: ignore[no-any-return]

    def fact(self, submission_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/facts/{submission_id}")  # type: ignore[no-any-return]

    def query(self, question: str, kb: str = "default", top_k: int = 5, **extra: Any) -> dict[str, Any]:
        body = {"question": question, "kb": kb, "top_k": top_k, **extra}
        return self._call("POST", "/v1/query", idempotent=True, json=body)  # type: ignore[no-any-return]

    def feedback(
        self, question: str, answer: str, correct: bool, *, kb: str = "default", expected: str | None = None,
        reasoner_version: str | None = None,
    ) -> dict[str, Any]:
        """Say whether ``answer`` (a name as :meth:`query` returned it) answers ``question``; ``expected``,
        with ``correct=False``, names the right one. ``{"count": 1, "ids": [ID]}``."""
        item = {"question": question, "answer": answer, "correct": correct, "expected": expected,
                "reasoner_version": reasoner_version}
        return self.feedback_batch([item], kb=kb)

    def feedback_batch(self, items: Sequence[dict[str, Any]], kb: str = "default") -> dict[str, Any]:
        """Up to 1000 feedback items (question, answer, correct, expected?, reasoner_version?), all
        recorded or, when any is invalid, none."""
        return self._call("POST", "/v1/feedback", json={"kb": kb, "items": list(items)})  # type: ignore[no-any-return]

    def feedback_list(self, kb: str | None = None, limit: int = 50) -> dict[str, Any]:
        """The newest feedback, of ``kb`` or of all."""
        params: dict[str, Any] = {"limit": limit, **({"kb": kb} if kb else {})}
        return self._call("GET", "/v1/feedback", params=params)  # type: ignore[no-any-return]

    def models(self, kind: str | None = None, kb: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Registered model versions, newest first (admin scope), with their parent, watermark and gates."""
        params = {k: v for k, v in (("kind", kind), ("kb", kb), ("limit", limit)) if v is not None}
        return list(self._call("GET", "/v1/models", params=params)["items"])

    def learn(self, kb: str = "default", kind: str = "scorer") -> dict[str, Any]:
        """Queue a continual update of ``kb``'s ``kind`` now (admin scope); ``{"kb", "kind", "new"}``."""
        return self._call("POST", "/v1/models/learn", json={"kb": kb, "kind": kind})  # type: ignore[no-any-return]

    def unlearned(self, kb: str = "default", kind: str = "scorer") -> int:
        """How many committed facts (answers marked) ``kb``'s active ``kind`` has not learned yet."""
        return int(self._call("GET", "/v1/models/learn", params={"kb": kb, "kind": kind})["new"])

    def activate(self, version: str) -> dict[str, Any]:
        """Serve ``version`` for its kind and kb (admin scope): a swap, a rollback by hand, or the end
        of a trial (``promote`` is the same)."""
        return self._call("POST", f"/v1/models/{quote(version, safe='')}/activate")  # type: ignore[no-any-return]

    def trial(self, version: str, mode: str, share: float | None = None) -> dict[str, Any]:
        """Put ``version`` on trial (admin scope): ``mode`` ``shadow``, ``ab`` (with ``share``), or
        ``stop`` to take it off."""
        path = f"/v1/models/{quote(version, safe='')}/{mode}"
        if mode == "ab":
            return self._call("POST", path, json={"share": share})  # type: ignore[no-any-return]
        return self._call("POST", path)  # type: ignore[no-any-return]

    def rollback(self, kb: str, kind: str) -> dict[str, Any]:
        """Serve ``kb``'s last good ``kind`` again (admin scope)."""
        return self._call("POST", "/v1/models/rollback", json={"kb": kb, "kind": kind})  # type: ignore[no-any-return]

    def figures(self, version: str) -> dict[str, Any]:
        """What ``version`` answered per role (active, ab, shadow), from every API process."""
        return self._call("GET", f"/v1/models/{quote(version, safe='')}/figures")  # type: ignore[no-any-return]

    def review(self, **params: Any) -> dict[str, Any]:
        return self._call("GET", "/v1/review", params=params)  # type: ignore[no-any-return]

    def decide(self, submission_id: str, decision: str, reason: str = "") -> dict[str, Any]:
        body = {"decision": decision, "reason": reason}
        return self._call("POST", f"/v1/review/{submission_id}", json=body)  # type: ignore[no-any-return]

    def create_key(self, name: str, scopes: Sequence[str], *, kbs: Sequence[str] | None = None,
                   expires_in_days: float | None = None) -> dict[str, Any]:
        """A new API key (admin scope); its secret is in ``["key"]``, shown this once."""
        body = {"name": name, "scopes": list(scopes), "kbs": list(kbs) if kbs is not None else None,
                **({"expires_in_days": expires_in_days} if expires_in_days is not None else {})}
        return self._call("POST", "/v1/keys", json=body)  # type: ignore[no-any-return]

    def list_keys(self, include_revoked: bool = False) -> list[dict[str, Any]]:
        """Every key, newest first, without secrets (admin scope)."""
        return list(self._call("GET", "/v1/keys", params={"include_revoked": include_revoked})["items"])

    def revoke_key(self, key_id: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/keys/{key_id}/revoke", idempotent=True)  # type: ignore[no-any-return]

    def rotate_key(self, key_id: str) -> dict[str, Any]:
        """A new secret for the key (same name, scopes, kbs), in ``["key"]``; the old one is revoked."""
        return self._call("POST", f"/v1/keys/{key_id}/rotate")  # type: ignore[no-any-return]

    def wait(
        self, batch_ids: Iterable[str], timeout: float = 600.0,
        progress: Callable[[int], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Poll until every batch is decided; ``progress(decided_facts)`` after each round."""
        pending = list(batch_ids)
        done: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while True:
            waiting = 0
            for batch_id in pending:
                status = self.batch(batch_id)
                if status["status"] == "done":
                    done[batch_id] = status
                else:
                    counts = status["counts"]
                    waiting += status["count"] - counts["pending"] - counts["checking"] - counts["accepted"]
            pending = [b for b in pending if b not in done]
            if progress:
                progress(sum(b["count"] for b in done.values()) + waiting)
            if not pending:
                return list(done.values())
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} batches still checking after {timeout:.0f} s")
            time.sleep(0.5)


def read_facts(path: str, default_source: str | None = None) -> Iterator[dict[str, Any]]:
    """Facts from JSONL (one object a line), CSV or TSV (a header with subject, predicate, object…).

    A MetaQA-style ``subject|predicate|object`` line file is read too.
    """
    import csv
    import json

    fact: dict[str, Any]
    with open(path, encoding="utf-8", newline="") as handle:
        if path.endswith((".jsonl", ".ndjson", ".json")):
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        fact = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"{path}:{number}: not JSON: {exc.msg}") from exc
                    if not isinstance(fact, dict):
                        raise ValueError(f"{path}:{number}: expected a JSON object")
                    if default_source and "source" not in fact:
                        fact["source"] = default_source
                    yield fact
            return
        if path.endswith((".csv", ".tsv")):
            reader = csv.DictReader(handle, delimiter="\t" if path.endswith(".tsv") else ",")
            for row in reader:
                fact = {k: v for k, v in row.items() if k and v not in (None, "")}
                if "evidence" in fact:
                    fact["evidence"] = {"text": fact["evidence"]}
                if default_source and "source" not in fact:
                    fact["source"] = default_source
                yield fact
            return
        for number, line in enumerate(handle, 1):
            parts = line.rstrip("\n").split("|") if "|" in line else line.rstrip("\n").split("\t")
            if len(parts) != 3:
                if line.strip():
                    raise ValueError(f"{path}:{number}: expected subject|predicate|object")
                continue
            fact = {"subject": parts[0], "predicate": parts[1], "object": parts[2]}
            if default_source:
                fact["source"] = default_source
            yield fact
