"""Per-version serving figures, shared by every API process through Redis, and the A/B split.

Every question a learned version answers is counted against that version and the role it answered
in (``active``, ``ab``, ``shadow``): questions, failures and latency. A shadow answer is also
compared with the active version's (same top answer or not). The check workers count the same way
what a shadow scorer judged, and the fused verdicts of the facts the active scorer judged. The
counts gather in memory and a background thread adds them to one Redis hash per kb and version
every second (``factloom:serving:{kb}:{version}``, fields ``{role}:{figure}``), so the figures of
many processes add up, survive a restart of any of them, and the monitor
(:mod:`factloom.learn.monitor`) and the admin Models page read them from one place.

Latency is kept as counts per bucket (:data:`LATENCY_EDGES_MS`), enough for a p95 to within a bucket.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import redis

from factloom.metrics import SERVED_QUESTIONS, SERVED_SECONDS, SHADOW_AGREEMENT

__all__ = ["ROLES", "LATENCY_EDGES_MS", "Figures", "Recorder", "read", "in_ab", "serving_key", "merged",
           "read_verdicts"]

log = logging.getLogger(__name__)

ROLES = ("active", "ab", "shadow")
# upper edges of the latency buckets, ms; one more bucket holds the slower answers
LATENCY_EDGES_MS = (10, 25, 50, 100, 250, 500, 1000, 2500, 10000)
# the figures of a version are kept this long after its last answer
_KEEP_S = 30 * 24 * 3600


def serving_key(kb: str, version: str) -> str:
    return f"factloom:serving:{kb}:{version}"


@dataclass
class Figures:
    """One version's figures in one role: answered questions, failures, latency buckets and, for a
    shadow, how many of its answers were compared with the active version's and agreed."""

    questions: int = 0
    errors: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_EDGES_MS) + 1))
    compared: int = 0
    agreed: int = 0

    @property
    def error_rate(self) -> float:
        return self.errors / self.questions if self.questions else 0.0

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.compared if self.compared else None

    def quantile_ms(self, q: float) -> float | None:
        """The upper edge of the bucket that holds the ``q`` quantile (``None`` without answers; the
        last edge, doubled, for answers slower than every edge)."""
        total = sum(self.buckets)
        if not total:
            return None
        seen = 0
        for i, n in enumerate(self.buckets):
            seen += n
            if seen >= q * total:
                return float(LATENCY_EDGES_MS[i] if i < len(LATENCY_EDGES_MS) else 2 * LATENCY_EDGES_MS[-1])
        return float(2 * LATENCY_EDGES_MS[-1])

    @property
    def p95_ms(self) -> float | None:
        return self.quantile_ms(0.95)

    def minus(self, earlier: Figures) -> Figures:
        """What was added since ``earlier`` (a snapshot of the same counts)."""
        return Figures(self.questions - earlier.questions, self.errors - earlier.errors,
                       [a - b for a, b in zip(self.buckets, earlier.buckets, strict=True)],
                       self.compared - earlier.compared, self.agreed - earlier.agreed)

    def as_fields(self, role: str) -> dict[str, int]:
        out = {f"{role}:q": self.questions, f"{role}:err": self.errors, f"{role}:cmp": self.compared,
               f"{role}:agree": self.agreed}
        out.update({f"{role}:b{i}": n for i, n in enumerate(self.buckets)})
        return out

    @classmethod
    def of_fields(cls, fields: dict[str, int], role: str) -> Figures:
        return cls(fields.get(f"{role}:q", 0), fields.get(f"{role}:err", 0),
                   [fields.get(f"{role}:b{i}", 0) for i in range(len(LATENCY_EDGES_MS) + 1)],
                   fields.get(f"{role}:cmp", 0), fields.get(f"{role}:agree", 0))


def read(client: redis.Redis, kb: str, version: str) -> dict[str, Figures]:
    """``role → Figures`` of ``version`` on ``kb``, as every process flushed them (zeros where none)."""
    fields = _fields(client, kb, version)
    return {role: Figures.of_fields(fields, role) for role in ROLES}


def read_verdicts(client: redis.Redis, kb: str, version: str) -> Counter[str]:
    """How many facts the scorer ``version`` judged ended ``accepted``, ``rejected``, ``needs_review``."""
    return Counter({k[8:]: n for k, n in _fields(client, kb, version).items() if k.startswith("verdict:")})


def _fields(client: redis.Redis, kb: str, version: str) -> dict[str, int]:
    raw = client.hgetall(serving_key(kb, version))
    return {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}  # type: ignore[union-attr]


def in_ab(client_id: str, version: str, share: float) -> bool:
    """Whether the client ``client_id`` (an API key's id) is in the ``share`` of an A/B trial of
    ``version``: a hash of both, so a key stays on its side for the whole trial and a new trial
    draws its sides afresh."""
    digest = hashlib.sha256(f"{version}\x00{client_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def _bucket(ms: float) -> int:
    for i, edge in enumerate(LATENCY_EDGES_MS):
        if ms <= edge:
            return i
    return len(LATENCY_EDGES_MS)


class Recorder:
    """Counts one process's answers per (kb, version, role) and adds them to Redis every
    ``flush_s`` seconds from a daemon thread (a Redis that is down keeps them for the next flush)."""

    def __init__(self, client: redis.Redis, flush_s: float = 1.0) -> None:
        self.client = client
        self.flush_s = flush_s
        self._counts: dict[tuple[str, str], Counter[str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def answered(self, kb: str, versions: Sequence[str], role: str, ms: float, *, ok: bool = True) -> None:
        """One question answered in ``ms`` by the models of ``versions`` (a router and a reasoner)."""
        for version in versions:
            self._add(kb, version, {f"{role}:q": 1, f"{role}:err": 0 if ok else 1, f"{role}:b{_bucket(ms)}": 1})
            SERVED_QUESTIONS.labels(kb=kb, version=version, role=role).inc()
        SERVED_SECONDS.labels(kb=kb, role=role).observe(ms / 1000)

    def decided(self, kb: str, version: str, verdicts: Sequence[str]) -> None:
        """The fused verdicts of facts the scorer ``version`` judged (``accepted``, ``rejected``,
        ``needs_review``)."""
        self._add(kb, version, Counter(f"verdict:{v}" for v in verdicts))

    def compared(self, kb: str, version: str, *, agreed: bool) -> None:
        """A shadow answer of ``version`` was compared with the active version's top answer."""
        self._add(kb, version, {"shadow:cmp": 1, "shadow:agree": 1 if agreed else 0})
        SHADOW_AGREEMENT.labels(kb=kb, version=version, agree=str(agreed).lower()).inc()

    def _add(self, kb: str, version: str, counts: dict[str, int]) -> None:
        with self._lock:
            self._counts.setdefault((kb, version), Counter()).update(counts)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="serving-figures", daemon=True)
                self._thread.start()

    def flush(self) -> None:
        with self._lock:
            counts, self._counts = self._counts, {}
        if not counts:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for (kb, version), fields in counts.items():
                key = serving_key(kb, version)
                for name, n in fields.items():
                    if n:
                        pipe.hincrby(key, name, n)
                pipe.expire(key, _KEEP_S)
            pipe.execute()
        except redis.RedisError:
            log.warning("serving figures not flushed (Redis unavailable); kept for the next flush")
            with self._lock:
                for key2, fields in counts.items():
                    self._counts.setdefault(key2, Counter()).update(fields)

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self.flush()


def merged(figures: Iterable[Figures]) -> Figures:
    """The sum of several roles' figures (a version's whole service)."""
    out = Figures()
    for f in figures:
        out = Figures(out.questions + f.questions, out.errors + f.errors,
                      [a + b for a, b in zip(out.buckets, f.buckets, strict=True)],
                      out.compared + f.compared, out.agreed + f.agreed)
    return out
