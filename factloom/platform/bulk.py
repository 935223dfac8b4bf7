"""Bulk ingest through the real API: batches posted with a progress bar, then waited for; answer
feedback posted the same way."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from tqdm import tqdm

from factloom.client import ApiError, Client, read_facts

__all__ = ["BulkResult", "ingest_facts", "ingest_file", "post_feedback"]


@dataclass(frozen=True, slots=True)
class BulkResult:
    submitted: int
    duplicates: int
    batches: list[str]
    counts: dict[str, int]


def _chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def _submit(client: Client, chunk: list[dict[str, Any]], kb: str, bar: tqdm) -> dict[str, Any]:
    """Post one batch, waiting as long as the platform asks while the kb's check backlog is full
    (429): a bulk load is the pipeline that backlog limit is there to slow down."""
    while True:
        try:
            return client.submit(chunk, kb=kb)
        except ApiError as exc:
            if exc.status != 429:
                raise
            wait = exc.retry_after or 10.0
            bar.set_postfix_str(f"the checks are behind: waiting {wait:.0f} s")
            time.sleep(wait)
            bar.set_postfix_str("")


def ingest_facts(
    client: Client, facts: Iterable[dict[str, Any]], *, kb: str, batch_size: int = 1000,
    wait: bool = True, total: int | None = None, timeout: float = 3600.0, show: bool = True,
) -> BulkResult:
    batches: list[str] = []
    submitted = duplicates = 0
    with tqdm(total=total, unit="fact", desc="submit", disable=not show) as bar:
        for chunk in _chunks(facts, batch_size):
            answer = _submit(client, chunk, kb, bar)
            batches.append(answer["batch_id"])
            submitted += answer["count"]
            duplicates += answer["duplicates"]
            bar.update(len(chunk))
    counts: dict[str, int] = {}
    if wait and batches:
        with tqdm(total=submitted, unit="fact", desc="check", disable=not show) as bar:
            def progress(decided: int) -> None:
                bar.update(decided - bar.n)

            for status in client.wait(batches, timeout=timeout, progress=progress):
                for name, n in status["counts"].items():
                    counts[name] = counts.get(name, 0) + n
    return BulkResult(submitted=submitted, duplicates=duplicates, batches=batches, counts=counts)


def ingest_file(
    client: Client, path: str, *, kb: str, source: str | None = None, batch_size: int = 1000,
    wait: bool = True, show: bool = True,
) -> BulkResult:
    # the whole file is read and checked before the first batch goes out: a bad line fails the
    # command with its line number and nothing submitted
    facts = list(read_facts(path, default_source=source))
    for number, fact in enumerate(facts, 1):
        missing = [k for k in ("subject", "predicate", "object") if not fact.get(k)]
        if missing:
            raise ValueError(f"{path}: record {number} lacks {', '.join(missing)}")
    return ingest_facts(
        client, facts, kb=kb, batch_size=batch_size, wait=wait, total=len(facts), show=show,
    )


def post_feedback(client: Client, items: Sequence[dict[str, Any]], *, kb: str, batch_size: int = 1000,
                  show: bool = True) -> int:
    """Post feedback items (question, answer, correct, expected?) in batches, with a progress bar;
    returns how many were recorded."""
    recorded = 0
    with tqdm(total=len(items), desc="feedback", unit="answer", disable=not show) as bar:
        for chunk in _chunks(items, batch_size):
            recorded += int(client.feedback_batch(chunk, kb=kb)["count"])
            bar.update(len(chunk))
    return recorded
