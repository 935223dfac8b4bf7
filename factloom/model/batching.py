"""Dynamic batching: concurrent callers' items are collected for a short window and run as one batch."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

__all__ = ["DynamicBatcher", "Overloaded"]

T = TypeVar("T")
R = TypeVar("R")


class Overloaded(RuntimeError):
    """The batcher's waiting line is full: the caller should come back later rather than queue."""


class DynamicBatcher(Generic[T, R]):
    """Runs ``fn(items) -> results`` (same order) on batches of at most ``max_batch`` items.

    The first waiting item opens a collection window of ``window_ms``; the batch closes when it is
    full or the window ends. Each caller gets its own result (or its batch's exception).

    Args:
        fn: the batched function, called on background threads (thread-safe when ``workers > 1``).
        max_batch: largest batch (16).
        window_ms: how long the first item waits for company (2 ms).
        workers: batches run at once: with two, one batch's store round trips overlap the other's
            model time.
        max_waiting: items that may wait for a batch; one more raises :class:`Overloaded` at once
            (0: no limit). A line longer than a few batches only adds latency to every caller.
    """

    def __init__(self, fn: Callable[[Sequence[T]], Sequence[R]], *, max_batch: int = 16,
                 window_ms: float = 2.0, name: str = "batcher", workers: int = 1, max_waiting: int = 0) -> None:
        if workers < 1:
            raise ValueError("a batcher needs at least one worker")
        self.fn = fn
        self.max_batch = max_batch
        self.window_s = window_ms / 1000.0
        self.batches = 0
        self.items = 0
        self._queue: queue.Queue[tuple[T, Future[R]]] = queue.Queue(maxsize=max_waiting)
        self._take = threading.Lock()  # one worker collects a batch at a time
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(max_batch={self.max_batch}, window_ms={self.window_s * 1000:g}, "
                f"workers={len(self._threads)})")

    @property
    def waiting(self) -> int:
        """Items waiting for a batch now (approximate)."""
        return self._queue.qsize()

    def submit(self, item: T, timeout: float | None = 60.0) -> R:
        future: Future[R] = Future()
        try:
            self._queue.put_nowait((item, future))
        except queue.Full:
            raise Overloaded(f"{self._queue.maxsize} items already wait for a batch") from None
        return future.result(timeout=timeout)

    def _loop(self) -> None:
        import time

        while True:
            with self._take:
                first = self._queue.get()
                batch = [first]
                deadline = time.monotonic() + self.window_s
                while len(batch) < self.max_batch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        batch.append(self._queue.get(timeout=left))
                    except queue.Empty:
                        break
                self.batches += 1
                self.items += len(batch)
            try:
                results = self.fn([item for item, _ in batch])
                for (_, future), result in zip(batch, results, strict=True):
                    future.set_result(result)
            except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
