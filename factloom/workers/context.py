"""What a worker process opens once and reuses across tasks: ledger, graph store, models."""

from __future__ import annotations

import threading
from functools import cached_property

from factloom.config import Settings, get_settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database
from factloom.model.embedder import Embedder
from factloom.verify import ConsistencyVerifier, VerdictRule, Verifier

__all__ = ["WorkerContext", "context"]


class WorkerContext:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()

    @cached_property
    def db(self) -> Database:
        return Database(self.settings.sql_url)

    @cached_property
    def store(self) -> Neo4jStore:
        return Neo4jStore(self.settings.neo4j_uri, self.settings.neo4j_auth())

    @cached_property
    def embedder(self) -> Embedder:
        return Embedder(self.settings.embedder_path or None, device=self.settings.device)

    @cached_property
    def verifiers(self) -> list[Verifier]:
        return [ConsistencyVerifier(self.settings.functional_predicates)]

    @cached_property
    def rule(self) -> VerdictRule:
        return VerdictRule(accept=self.settings.accept_threshold, reject=self.settings.reject_threshold)


_context: WorkerContext | None = None
_context_lock = threading.Lock()


def context() -> WorkerContext:
    global _context
    with _context_lock:
        if _context is None:
            _context = WorkerContext(get_settings())
        return _context
