"""The long-lived objects one API process shares: settings, ledger, graph store, models."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import redis

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.learn.serving import Recorder
from factloom.ledger import Database
from factloom.model.embedder import Embedder
from factloom.platform.admin.throttle import LoginThrottle
from factloom.platform.auth.service import KeyCache

__all__ = ["Resources"]


@dataclass
class Resources:
    settings: Settings
    db: Database
    store: Neo4jStore
    # one client, one connection pool, for the process: /readyz and whatever else asks Redis (a new
    # client per call opened a connection per call)
    redis: redis.Redis
    keys: KeyCache = field(default_factory=KeyCache, repr=False)  # the API keys verified lately
    # what each model version answered, flushed to Redis every second (factloom.learn.serving)
    figures: Recorder = field(init=False, repr=False)
    # failed admin sign-ins per account name, shared by the replicas through Redis
    login_throttle: LoginThrottle = field(init=False, repr=False)
    _embedder: Embedder | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.figures = Recorder(self.redis)
        self.login_throttle = LoginThrottle(self.redis)

    @classmethod
    def open(cls, settings: Settings) -> Resources:
        return cls(
            settings=settings,
            db=Database(settings.sql_url),
            store=Neo4jStore(settings.neo4j_uri, settings.neo4j_auth()),
            redis=redis.Redis.from_url(settings.redis_url, socket_timeout=1, socket_connect_timeout=1),
        )

    @property
    def embedder(self) -> Embedder:
        """The sentence model, loaded on first use (a few seconds) and shared by all requests."""
        with self._lock:
            if self._embedder is None:
                self._embedder = Embedder(self.settings.embedder_path or None, device=self.settings.device,
                                          token_cache_size=self.settings.query_question_cache)
            return self._embedder

    def close(self) -> None:
        self.figures.close()
        self.store.close()
        self.db.dispose()
        self.redis.close()
