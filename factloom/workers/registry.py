"""The active model versions a worker checks with, from the ``model_version`` registry.

The registry is read at most once per ``ttl_s`` (one query for every kind and kb), so a version that
``factloom train`` registers as active is picked up within that many seconds, without a restart.
Artefacts are loaded once per version and kept; an artefact that fails to load is logged, remembered
and skipped (the verifier it feeds abstains, the fusion falls back to the rule) rather than failing
every check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from factloom.ledger import Database, VersionStatus, active_versions, trial_versions

__all__ = ["Active", "ActiveModels"]

log = logging.getLogger(__name__)

Loader = Callable[[Path, str], Any]


@dataclass(frozen=True, slots=True)
class Active:
    version: str
    model: Any


class ActiveModels:
    """Args:
        db: the ledger holding ``model_version``.
        loaders: kind (``"scorer"``, ``"fusion"``) → ``(artefact path, version) → loaded model``.
        ttl_s: how long one registry read is trusted.
    """

    def __init__(self, db: Database, loaders: dict[str, Loader], ttl_s: float = 10.0) -> None:
        self.db, self.loaders, self.ttl_s = db, loaders, ttl_s
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._active: dict[tuple[str, str], tuple[str, str]] = {}  # (kind, kb) → (version, artefact)
        self._shadows: dict[tuple[str, str], tuple[str, str]] = {}  # the versions in shadow, likewise
        self._loaded: dict[str, Any] = {}
        self._failed: set[str] = set()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kinds={sorted(self.loaders)}, ttl_s={self.ttl_s})"

    def get(self, kind: str, kb: str) -> Active | None:
        """The active ``kind`` of ``kb``, loaded; ``None`` when none is registered or it did not load."""
        with self._lock:
            self._refresh()
            return self._loaded_for(kind, kb, self._active.get((kind, kb)))

    def shadow(self, kind: str, kb: str) -> Active | None:
        """The ``kind`` of ``kb`` on a shadow trial (it judges beside the active one, unseen), loaded."""
        with self._lock:
            self._refresh()
            return self._loaded_for(kind, kb, self._shadows.get((kind, kb)))

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._read_at >= self.ttl_s:
            self._active = self._read()
            self._shadows = {key: (t.version, t.artefact) for key, t in trial_versions(self.db, self.loaders).items()
                             if t.mode == VersionStatus.shadow.value}
            self._read_at = now

    def _loaded_for(self, kind: str, kb: str, found: tuple[str, str] | None) -> Active | None:
        if found is None:
            return None
        version, artefact = found
        if version in self._failed:
            return None
        if version not in self._loaded:
            try:
                self._loaded[version] = self.loaders[kind](Path(artefact), version)
                log.info("loaded %s %s for kb %s from %s", kind, version, kb, artefact)
            except Exception:
                log.exception("cannot load %s %s from %s; checking without it", kind, version, artefact)
                self._failed.add(version)
                return None
        return Active(version, self._loaded[version])

    def _read(self) -> dict[tuple[str, str], tuple[str, str]]:
        return active_versions(self.db, self.loaders)
