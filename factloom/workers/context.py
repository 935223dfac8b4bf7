"""What a worker process opens once and reuses across tasks: ledger, graph store, models, verifiers."""

from __future__ import annotations

import threading
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import redis

from factloom.config import Settings, get_settings
from factloom.graph import Neo4jStore
from factloom.learn.serving import Recorder
from factloom.ledger import Database
from factloom.model.embedder import Embedder
from factloom.verify import VerdictRule
from factloom.workers.registry import ActiveModels
from factloom.workers.verifiers import CheckSetup

__all__ = ["WorkerContext", "context", "load_scorer", "load_fusion"]


def load_scorer(path: Path, version: str) -> Any:
    """A registered scorer artefact as the plausibility verifier."""
    from factloom.verify.plausibility import PlausibilityVerifier

    return PlausibilityVerifier.load(path, version=version)


def load_fusion(path: Path, version: str) -> Any:
    """A registered learned fusion (its own thresholds inside), or one whose thresholds were
    re-certified on live labels (``certified.json``: its base fusion, or the min rule, with the new
    thresholds); ``version`` names it in the results."""
    from factloom.verify.certified import CERTIFIED_FILE, CertifiedFusion
    from factloom.verify.fuse_model import LearnedFusion

    if (path / CERTIFIED_FILE).exists():
        meta = CertifiedFusion.read(path)
        base: Any = LearnedFusion.load(Path(meta["base"])) if meta.get("base") else VerdictRule()
        return CertifiedFusion(base, accept=meta["accept"], reject=meta["reject"], certificate=meta["certificate"],
                               version=version, learned=meta.get("base") is not None, base_artefact=meta.get("base"))
    fusion = LearnedFusion.load(path)
    fusion.version = version
    return fusion


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
    def redis(self) -> redis.Redis:
        """The broker's Redis, for locks and for reading what is queued."""
        return redis.Redis.from_url(self.settings.redis_url)

    @cached_property
    def figures(self) -> Recorder:
        """What the scorer versions judged (the shadow's agreement among it), for the model monitor."""
        return Recorder(self.redis)

    @cached_property
    def embedder(self) -> Embedder:
        with self._lock:
            return Embedder(self.settings.embedder_path or None, device=self.settings.device)

    def encode(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return self.embedder.encode(texts)

    @cached_property
    def registry(self) -> ActiveModels:
        return ActiveModels(self.db, {"scorer": load_scorer, "fusion": load_fusion},
                            ttl_s=self.settings.registry_refresh_s)

    @cached_property
    def checks(self) -> CheckSetup:
        return CheckSetup(self.settings, self.db, self.store, self.encode, self.registry,
                          text_version=lambda: self.embedder.version)

    @property
    def rule(self) -> VerdictRule:
        return self.checks.rule


_context: WorkerContext | None = None
_context_lock = threading.Lock()


def context() -> WorkerContext:
    global _context
    with _context_lock:
        if _context is None:
            _context = WorkerContext(get_settings())
        return _context
