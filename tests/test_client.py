"""The Python client tries again where the server asked it to, and only where that is safe.

The server's side (which answers carry ``Retry-After``) is tested on the real services in
tests/platform/ (test_recovery.py, test_overload.py, test_rate_limits.py); here the answers are
scripted, to see each rule of the client on its own."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable

import httpx
import pytest

from factloom.client import ApiError, Client

Answer = Callable[[httpx.Request], httpx.Response]


def scripted(*answers: Answer | type[Exception]) -> tuple[Client, list[httpx.Request]]:
    """A client whose n-th request gets the n-th answer (a response, or a transport error raised)."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers[len(seen) - 1]
        if isinstance(answer, type):
            raise answer("scripted", request=request)  # type: ignore[call-arg]
        return answer(request)

    return Client("http://factloom.test", "fl_x_y", transport=httpx.MockTransport(handle)), seen


def status(code: int, **headers: str) -> Answer:
    body = {"title": "t", "detail": "d", "status": code} if code >= 400 else {"batch_id": "b", "count": 1}
    return lambda _request: httpx.Response(code, json=body, headers=headers)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def test_a_429_is_sent_again_after_the_retry_after_it_names(waits: list[float]) -> None:
    client, seen = scripted(status(429, **{"Retry-After": "3"}), status(202))
    assert client.submit([{"subject": "a", "predicate": "p", "object": "b"}])["batch_id"] == "b"
    assert len(seen) == 2 and waits == [3.0]


def test_retry_after_as_an_http_date(waits: list[float]) -> None:
    later = email.utils.formatdate(time.time() + 10, usegmt=True)
    client, _ = scripted(status(503, **{"Retry-After": later}), status(202))
    client.submit([])
    assert 8.0 <= waits[0] <= 10.0


def test_a_503_without_retry_after_backs_off_and_the_last_answer_is_raised(waits: list[float]) -> None:
    client, seen = scripted(*[status(503)] * 4)
    client.retries = 3
    with pytest.raises(ApiError) as raised:
        client.batch("b")
    assert raised.value.status == 503 and len(seen) == 4
    assert len(waits) == 3 and waits[0] < waits[2]  # exponential, with jitter


def test_it_stops_within_max_wait(waits: list[float]) -> None:
    client, seen = scripted(status(429, **{"Retry-After": "100"}), status(202))
    client.max_wait_s = 30
    with pytest.raises(ApiError):
        client.batch("b")
    assert len(seen) == 1 and waits == []


def test_errors_that_are_not_for_now_are_not_retried(waits: list[float]) -> None:
    client, seen = scripted(status(422), status(202))
    with pytest.raises(ApiError):
        client.submit([])
    assert len(seen) == 1


def test_a_refused_connection_is_retried_even_for_a_decision(waits: list[float]) -> None:
    client, seen = scripted(httpx.ConnectError, lambda _r: httpx.Response(200, json={"ok": True}))
    assert client.decide("s", "accept") == {"ok": True}
    assert len(seen) == 2


def test_a_lost_answer_is_retried_only_where_sending_twice_changes_nothing(waits: list[float]) -> None:
    client, seen = scripted(httpx.ReadTimeout, status(202))
    client.submit([])  # one submission per fact key: the second send stores nothing new
    assert len(seen) == 2

    client, seen = scripted(httpx.ReadTimeout, lambda _r: httpx.Response(200, json={}))
    with pytest.raises(httpx.ReadTimeout):
        client.decide("s", "accept")  # the first may have been applied
    assert len(seen) == 1


def test_retries_zero_sends_once(waits: list[float]) -> None:
    client, seen = scripted(status(429, **{"Retry-After": "1"}), status(202))
    client.retries = 0
    with pytest.raises(ApiError):
        client.submit([])
    assert len(seen) == 1
