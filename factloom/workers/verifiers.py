"""The verifiers and the fusion a worker runs for one chunk of one kb, and the state they learn from.

What is learned from the ledger or the graph is relearned at most every ``verifier_refresh_s``
seconds, never per task: source trust (from past verdicts and review decisions, all kbs) and each
kb's type constraints (from its accepted graph, plus the declared schema file). Trained models come
from the registry (:class:`~factloom.workers.registry.ActiveModels`): the kb's active scorer feeds
the plausibility verifier, its active learned fusion replaces the min rule.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from sqlalchemy import func, select

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.graph.types import entity_key
from factloom.ledger import Database, FactSubmission, Status
from factloom.ledger.evidence import has_stored_texts, stored_texts
from factloom.verify import Claim, ConsistencyVerifier, VerdictRule, Verifier, VerifierResult
from factloom.verify.base import GraphView
from factloom.verify.corroboration import CorroborationVerifier, SourceTrust
from factloom.verify.domains import TypeConstraints, TypeVerifier, load_schema
from factloom.verify.fusion import Fused
from factloom.verify.image_evidence import ImageEvidenceVerifier
from factloom.verify.text_evidence import TextEvidenceVerifier
from factloom.workers.registry import ActiveModels

__all__ = ["CheckSetup", "Checkers", "Fusion", "Abstaining", "Canonical", "Floored", "trust_counts"]

log = logging.getLogger(__name__)

# outcomes a source's claim can have had: accepted (by the checks or a reviewer) or rejected
_TRUE = (Status.accepted, Status.reviewed, Status.committed)
_FALSE = (Status.rejected,)


class Fusion(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    def fuse(self, results: Sequence[VerifierResult]) -> Fused: ...


class Abstaining:
    """A verifier that has nothing to judge with (no scorer trained for the kb): it says why."""

    def __init__(self, name: str, reason: str) -> None:
        self.name, self.reason = name, reason

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        return [VerifierResult(self.name, None, self.reason) for _ in claims]


class Floored:
    """A verifier whose doubt may send a fact to review but never reject it alone.

    Under the min rule a plausibility scorer calibrated on random negatives would auto-reject any
    fact it ranks low, true but rare ones included; until a learned fusion has been trained on the
    ledger's labels, its probability is floored at ``floor`` (the original stays in ``details``).
    """

    def __init__(self, inner: Verifier, floor: float) -> None:
        self.inner, self.floor = inner, floor
        self.name = inner.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r}, floor={self.floor})"

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        out = []
        for r in self.inner.check(claims, graph, now):
            if r.probability is not None and r.probability < self.floor:
                r = VerifierResult(r.verifier, self.floor, f"{r.explanation}; alone it only asks for review",
                                   score=r.score, details={**r.details, "unfloored": r.probability},
                                   model_version=r.model_version)
            out.append(r)
        return out


class Canonical:
    """Hands a verifier that knows entities by their stored names (the scorer) the claims with their
    subject and object resolved to those names ("blade runner" or an alias → "Blade Runner")."""

    def __init__(self, inner: Verifier, names: Callable[[Sequence[str]], dict[str, str]]) -> None:
        self.inner, self.names = inner, names
        self.name = inner.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        known = self.names(sorted({n for c in claims for n in (c.subject, c.object)}))
        resolved = [replace(c, subject=known.get(c.subject, c.subject), object=known.get(c.object, c.object))
                    for c in claims]
        return self.inner.check(resolved, graph, now)


@dataclass
class Checkers:
    """What checks one chunk: the verifiers in order, the fusion, and the versions behind them."""

    verifiers: list[Verifier]
    fusion: Fusion
    versions: dict[str, str | None] = field(default_factory=dict)

    def thresholds(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in ("accept", "reject"):
            value = getattr(self.fusion, name, None)
            out[name] = float(value) if value is not None else None
        certificate = getattr(self.fusion, "certificate", None)
        if certificate is not None:
            out["certificate"] = certificate.as_dict() if hasattr(certificate, "as_dict") else certificate
        return out


def trust_counts(db: Database) -> dict[str, tuple[int, int]]:
    """Per source, (claims judged true, claims judged false) over the whole ledger; one GROUP BY."""
    with db.session() as session:
        rows = session.execute(
            select(FactSubmission.source, FactSubmission.status, func.count())
            .where(FactSubmission.source.is_not(None), FactSubmission.status.in_([*_TRUE, *_FALSE]))
            .group_by(FactSubmission.source, FactSubmission.status)
        ).all()
    out: dict[str, tuple[int, int]] = {}
    for source, status, n in rows:
        if source is None:
            continue
        t, f = out.get(source, (0, 0))
        out[source] = (t + n, f) if status in _TRUE else (t, f + n)
    return out


class CheckSetup:
    """Args:
        settings: the worker's settings (thresholds, type predicates, schema path, refresh periods).
        db, store: the ledger and the graph.
        encode: texts → unit embeddings (the worker's sentence model, loaded on first use).
        registry: the active scorer and fusion versions.

    Per chunk, the claims without evidence text get the stored evidence about their entities
    (:func:`~factloom.ledger.evidence.stored_texts`: two bounded queries for the whole chunk).
    """

    def __init__(
        self, settings: Settings, db: Database, store: Neo4jStore,
        encode: Callable[[list[str]], npt.NDArray[np.float32]], registry: ActiveModels,
        text_version: Callable[[], str] = lambda: "text-1",
    ) -> None:
        self.settings, self.db, self.store, self.registry = settings, db, store, registry
        self.rule = VerdictRule(accept=settings.accept_threshold, reject=settings.reject_threshold)
        self.consistency = ConsistencyVerifier(settings.functional_predicates)
        self.text = TextEvidenceVerifier(encode)
        self.stored_per_entity = 8  # stored evidence texts read per entity and side, the most recent
        self._text_version = text_version
        self.type_predicates = list(settings.type_predicates)
        self.schema = {p: {k: [entity_key(t) for t in v] for k, v in spec.items()}
                       for p, spec in (load_schema(Path(settings.type_schema_path)).items()
                                       if settings.type_schema_path else ())}
        self._lock = threading.Lock()
        self._trust: tuple[float, SourceTrust] | None = None
        self._types: dict[str, tuple[float, TypeConstraints]] = {}
        self._image: ImageEvidenceVerifier | None = None
        self._has_text: dict[str, float] = {}  # kb → when it was last seen without any stored evidence text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(registry={self.registry!r})"

    # ------------------------------------------------------------ learned state, refreshed

    def trust(self) -> SourceTrust:
        with self._lock:
            now = time.monotonic()
            if self._trust is None or now - self._trust[0] >= self.settings.verifier_refresh_s:
                trust = SourceTrust.from_counts(trust_counts(self.db), mean=self.settings.trust_prior_mean,
                                                strength=self.settings.trust_prior_strength)
                self._trust = (now, trust)
            return self._trust[1]

    def constraints(self, kb: str) -> TypeConstraints:
        with self._lock:
            now = time.monotonic()
            hit = self._types.get(kb)
            if hit is None or now - hit[0] >= self.settings.verifier_refresh_s:
                domain, range_ = self.store.type_counts(kb, self.type_predicates)
                cons = TypeConstraints(self.settings.type_min_support).learn_counts(domain, range_)
                hit = self._types[kb] = (now, cons.override(self.schema))
            return hit[1]

    def image(self) -> ImageEvidenceVerifier:
        with self._lock:
            if self._image is None:
                evidence_dir = self.settings.evidence_dir

                def image_of(claim: Claim) -> Path | None:
                    return evidence_dir / claim.image_path if claim.image_path else None

                device = "cpu" if self.settings.device == "auto" else self.settings.device
                self._image = ImageEvidenceVerifier(self.settings.image_model_path or None, image_of, device=device)
            return self._image

    def has_stored_text(self, kb: str) -> bool:
        """Whether the kb has stored evidence text at all; a kb without any is re-asked only after the
        refresh period, so a chunk of a kb that never had evidence text costs no lookup."""
        with self._lock:
            seen = self._has_text.get(kb)
            if seen == math.inf:
                return True
            if seen is not None and time.monotonic() - seen < self.settings.verifier_refresh_s:
                return False
        found = has_stored_texts(self.db, kb)
        with self._lock:
            self._has_text[kb] = math.inf if found else time.monotonic()  # evidence text is never removed
        return found

    # ------------------------------------------------------------ per chunk

    def entity_types(self, kb: str, claims: Sequence[Claim], cons: TypeConstraints) -> dict[str, list[str]]:
        """Types of the chunk's entities: the graph's type facts plus the chunk's own."""
        if not (cons.domain or cons.range):
            return {}
        names = {n for c in claims for n in (c.subject, c.object)}
        types = {k: set(v) for k, v in self.store.entity_types(kb, names, self.type_predicates).items()}
        for c in claims:
            if c.predicate in self.type_predicates:
                types.setdefault(c.subject, set()).add(entity_key(c.object))
        return {k: sorted(v) for k, v in types.items()}

    def canonical(self, kb: str, scorer: Verifier) -> Verifier:
        return Canonical(scorer, lambda names: self.store.canonical_names(kb, names))

    def shadow_scorer(self, kb: str) -> tuple[str, Verifier] | None:
        """The kb's scorer version in shadow and its verifier, when one is on a shadow trial."""
        shadow = self.registry.shadow("scorer", kb)
        return (shadow.version, self.canonical(kb, shadow.model)) if shadow is not None else None

    def for_chunk(self, kb: str, claims: Sequence[Claim]) -> Checkers:
        cons = self.constraints(kb)
        scorer = self.registry.get("scorer", kb)
        fusion = self.registry.get("fusion", kb)
        # claims without evidence text are checked against the stored evidence about their entities
        bare = {n for c in claims if not c.evidence_text for n in (c.subject, c.object)}
        stored = (stored_texts(self.db, kb, bare, per_entity=self.stored_per_entity)
                  if bare and self.has_stored_text(kb) else {})
        if stored or any(c.evidence_text for c in claims):
            self.text.version = self._text_version()  # the sentence model loads with the first evidence
        plausibility: Verifier = Abstaining("plausibility", f"no scorer trained for kb '{kb}'")
        if scorer is not None:
            floor = min(max(0.2, self.rule.reject + 0.05), (self.rule.reject + self.rule.accept) / 2)
            plausibility = self.canonical(kb, scorer.model)
            # a fusion learned on the ledger's labels sees the scorer unfloored; the min rule (also
            # one whose thresholds were re-certified, factloom.verify.certified) keeps the floor
            learned = fusion is not None and getattr(fusion.model, "learned", True)
            plausibility = plausibility if learned else Floored(plausibility, floor=floor)
        verifiers: list[Verifier] = [
            self.consistency,
            TypeVerifier(cons, self.entity_types(kb, claims, cons)),
            CorroborationVerifier(self.trust()),
            plausibility,
            self.text.with_stored(stored),
            self.image(),
        ]
        chosen: Fusion = fusion.model if fusion else self.rule
        versions = {"scorer": scorer.version if scorer else None,
                    "fusion": fusion.version if fusion else self.rule.version}
        return Checkers(verifiers, chosen, versions)
