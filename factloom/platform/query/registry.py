"""The learned models that answer a kb's questions in one API process: the kb's active router /
reasoner, and the version on trial (shadow or A/B) with the active models it answers beside.

The model registry is read at most every few seconds, so a promoted version serves within that
time; each version is loaded once and kept. A new version loads on a thread of its own while the
one before keeps answering (a kb's first version, with nothing to answer meanwhile, loads at once).
An artefact that is missing, corrupt or of another kind is logged and remembered, and the kb falls
back: :meth:`QueryModels.load_error` says why, :meth:`QueryModels.failed_versions` which versions.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import TypeVar

from factloom.config import Settings
from factloom.ledger import Database, Trial, active_versions, trial_versions
from factloom.model.features import RelationFeatures
from factloom.model.pipeline import LearnedPipeline, load_model
from factloom.model.precision import PrecisionPolicy
from factloom.model.reasoner import PathReasoner
from factloom.model.router import RelationRouter

__all__ = ["QueryModels", "Loaded", "OnTrial"]

log = logging.getLogger(__name__)
# how long a registry lookup is trusted: a promoted version serves within this many seconds
_REGISTRY_TTL_S = 5.0


@dataclass
class Loaded:
    router_version: str | None
    reasoner_version: str
    pipeline: LearnedPipeline

    @property
    def versions(self) -> tuple[str, ...]:
        """The registry versions that answer with these models (the figures are kept per version)."""
        return (self.reasoner_version,) if self.router_version is None else (self.router_version,
                                                                             self.reasoner_version)


@dataclass
class OnTrial:
    """A kb's version on trial and the models it answers with: the active ones, its kind swapped."""

    trial: Trial
    loaded: Loaded


class _Pending:
    """The models asked for are loading on a thread of their own."""


_PENDING = _Pending()


class _NotLoaded(ValueError):
    def __init__(self, version: str, why: str) -> None:
        super().__init__(why)
        self.version = version


M = TypeVar("M")


def _load_version(version: tuple[str, str], kind: type[M]) -> M:
    """The model of a registry ``(version, artefact)``, which must be a ``kind``; :class:`_NotLoaded`
    names the version whose artefact is missing, corrupt or of another kind."""
    from pathlib import Path

    try:
        model = load_model(Path(version[1]))
    except Exception as exc:
        raise _NotLoaded(version[0], f"{version[1]}: {exc}") from exc
    if not isinstance(model, kind):
        raise _NotLoaded(version[0], f"{version[1]} holds a {type(model).__name__}, not a {kind.__name__}")
    return model


class QueryModels:
    """Args:
        settings: ``query_precision`` and ``query_question_cache`` for the pipelines loaded.
        db: the ledger holding ``model_version``.
        features: the relation features every loaded pipeline shares.
        device: where the models run.
    """

    def __init__(self, settings: Settings, db: Database, features: RelationFeatures, device: str) -> None:
        self.settings = settings
        self.db = db
        self.features = features
        self.device = device
        self._lock = threading.Lock()
        self._looked_up: dict[str, tuple[float, Loaded | None, OnTrial | None]] = {}
        self._loaded: dict[tuple[str | None, str], Loaded] = {}
        # versions whose artefacts did not load: why, and which of them failed
        self._failed: dict[tuple[str | None, str], tuple[str, tuple[str, ...]]] = {}
        self._loading: set[tuple[str | None, str]] = set()  # versions loading on a thread of their own
        # kb → why its active versions are not loaded, and which versions those are
        self._errors: dict[str, tuple[str, tuple[str, ...]] | None] = {}

    def learned(self, kb: str) -> Loaded | None:
        """The active learned models for ``kb``, or ``None`` when no reasoner was trained for it or its
        artefacts did not load (:meth:`load_error` says why)."""
        return self._look_up(kb)[0]

    def on_trial(self, kb: str) -> OnTrial | None:
        """The version of ``kb`` on trial (shadow or A/B) with the models it answers with, or ``None``
        when none is, no active models serve the kb, or the trial's artefact did not load."""
        return self._look_up(kb)[1]

    def _look_up(self, kb: str) -> tuple[Loaded | None, OnTrial | None]:
        """The kb's active and trial models, from a registry read at most every few seconds. A new
        version loads on a thread of its own while the one before keeps answering (the kb's first
        version, with nothing to answer meanwhile, loads at once)."""
        now = time.monotonic()
        with self._lock:
            hit = self._looked_up.get(kb)
            if hit and now - hit[0] < _REGISTRY_TTL_S:
                return hit[1], hit[2]
            kinds = ("router", "reasoner")
            active = active_versions(self.db, kinds)
            versions = {kind: active.get((kind, kb)) for kind in kinds}
            serving = hit[1] if hit else None
            loaded, self._errors[kb] = self._get(versions, wait=serving is None), None
            pending = loaded is _PENDING
            if isinstance(loaded, _Pending):
                loaded = serving
            elif versions["reasoner"] is not None and loaded is None:
                self._errors[kb] = self._failed[self._key(versions)]
            on_trial = None
            trials = trial_versions(self.db, kinds)
            for kind in kinds:
                trial = trials.get((kind, kb))
                if loaded is not None and trial is not None:
                    swapped = self._get({**versions, kind: (trial.version, trial.artefact)}, wait=False)
                    pending = pending or swapped is _PENDING
                    on_trial = OnTrial(trial, swapped) if isinstance(swapped, Loaded) else None
                    break
            # while a version loads, look again shortly rather than after the whole TTL
            self._looked_up[kb] = (now - _REGISTRY_TTL_S + 0.25 if pending else now, loaded, on_trial)
            return loaded, on_trial

    @staticmethod
    def _key(versions: dict[str, tuple[str, str] | None]) -> tuple[str | None, str]:
        reasoner = versions["reasoner"]
        assert reasoner is not None
        return (versions["router"][0] if versions["router"] else None, reasoner[0])

    def _get(self, versions: dict[str, tuple[str, str] | None], *, wait: bool) -> Loaded | _Pending | None:
        """The models of ``versions``, loaded once; ``None`` without a reasoner or when they did not
        load; :data:`_PENDING` while they load on a thread of their own (``wait=False``)."""
        if versions["reasoner"] is None:
            return None
        key = self._key(versions)
        if key in self._loaded or key in self._failed:
            return self._loaded.get(key)
        if wait:
            self._load_into(key, versions)
            return self._loaded.get(key)
        if key not in self._loading:
            self._loading.add(key)
            threading.Thread(target=self._load_into, args=(key, versions, True), name="query-model-load",
                             daemon=True).start()
        return _PENDING

    def _load_into(self, key: tuple[str | None, str], versions: dict[str, tuple[str, str] | None],
                   background: bool = False) -> None:
        try:
            loaded = self._load(versions)
        except Exception as exc:  # a missing or corrupt artefact: the kb falls back, once logged
            log.exception("the models reasoner %s, router %s did not load", key[1], key[0])
            broken = exc.version if isinstance(exc, _NotLoaded) else None
            failed = (f"reasoner {key[1]}, router {key[0]}: {exc}",
                      (broken,) if broken else tuple(v for v in key if v is not None))
            with self._lock if background else contextlib.nullcontext():
                self._failed[key] = failed
                self._loading.discard(key)
            return
        with self._lock if background else contextlib.nullcontext():
            self._loaded[key] = loaded
            self._loading.discard(key)

    def load_error(self, kb: str) -> str | None:
        """Why the kb's active learned models are not loaded, when they failed to (as of the last
        :meth:`learned`); ``None`` when they loaded or none are registered."""
        error = self._errors.get(kb)
        return error[0] if error else None

    def failed_versions(self, kb: str) -> tuple[str, ...]:
        """The active versions of ``kb`` that did not load (as of the last :meth:`learned`)."""
        error = self._errors.get(kb)
        return error[1] if error else ()

    def _load(self, versions: dict[str, tuple[str, str] | None]) -> Loaded:
        reasoner_v = versions["reasoner"]
        assert reasoner_v is not None
        reasoner = _load_version(reasoner_v, PathReasoner)
        router = _load_version(versions["router"], RelationRouter) if versions["router"] else None
        policy = PrecisionPolicy(device=self.device, mode=self.settings.query_precision)
        log.info("loaded reasoner %s, router %s", reasoner_v[0], versions["router"])
        return Loaded(router_version=versions["router"][0] if versions["router"] else None,
                      reasoner_version=reasoner_v[0],
                      pipeline=LearnedPipeline(router, reasoner, self.features, policy, device=self.device,
                                               question_cache=self.settings.query_question_cache))
