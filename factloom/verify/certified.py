"""A fusion whose thresholds were re-certified on live labels (:mod:`factloom.learn.certification`).

The re-certification moves only the thresholds: the fused probability of a fact is still the base
fusion's (the learned fusion's calibrated probability, or the min rule's), and the thresholds apply
to it. ``accept`` / ``reject`` ``None`` means nothing is decided automatically on that side (the
live evidence certifies no threshold there), so every such fact waits for review.

The artefact is a directory holding ``certified.json``: the base artefact (``None`` for the min
rule), the thresholds and the certificate (the audit ledger's live certificates) that justify them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from factloom.verify.base import Verdict, VerifierResult
from factloom.verify.fusion import Fused

__all__ = ["CertifiedFusion", "CERTIFIED_FORMAT", "CERTIFIED_FILE"]

CERTIFIED_FORMAT = "factloom-certified-fusion-1"
CERTIFIED_FILE = "certified.json"


class _Base(Protocol):
    def fuse(self, results: Sequence[VerifierResult]) -> Fused: ...


class CertifiedFusion:
    """Args:
        base: the fusion that gives each fact its probability (a learned fusion or the min rule).
        accept: auto-accept at or above this fused probability; ``None``: nothing is auto-accepted.
        reject: auto-reject at or below it; ``None``: nothing is auto-rejected.
        certificate: what certified them (``AuditLedger`` certificates and figures, JSON-ready).
        learned: whether ``base`` is a learned fusion (the min rule keeps the scorer floored).
    """

    name = "fusion"

    def __init__(self, base: _Base, *, accept: float | None, reject: float | None,
                 certificate: dict[str, Any] | None = None, version: str = "certified", learned: bool = True,
                 base_artefact: str | None = None) -> None:
        if accept is not None and reject is not None and reject >= accept:
            raise ValueError(f"need reject < accept, got {reject}, {accept}")
        self.base, self.accept, self.reject = base, accept, reject
        self.live_certificate = certificate
        self.version, self.learned, self.base_artefact = version, learned, base_artefact

    def __repr__(self) -> str:
        return f"{type(self).__name__}(accept={self.accept}, reject={self.reject}, version={self.version!r})"

    @property
    def certificate(self) -> dict[str, Any] | None:
        """What each check result records beside the thresholds: the bounds and the look, not the whole
        certificate (that is in the artefact and the version's metrics)."""
        cert = self.live_certificate
        if cert is None:
            return None
        return {"live": True, "look": cert.get("look"), "target": cert.get("target"),
                **{f"{side}_bound": (cert.get(side) or {}).get("bound") for side in ("accept", "reject")}}

    def fuse(self, results: Sequence[VerifierResult]) -> Fused:
        return self.fuse_many([results])[0]

    def fuse_many(self, rows: Sequence[Sequence[VerifierResult]]) -> list[Fused]:
        many = getattr(self.base, "fuse_many", None)
        fused = many(rows) if many else [self.base.fuse(r) for r in rows]
        return [self._split(f) for f in fused]

    def _split(self, f: Fused) -> Fused:
        if f.probability is None:
            return f  # every verifier abstained: review, whatever the thresholds
        p = float(f.probability)
        why = f.reason.split("; ", 1)[-1] if "; " in f.reason else f.reason
        if self.accept is not None and p >= self.accept:
            return Fused(p, Verdict.accept, f"fused p {p:.4f} >= live-certified accept {self.accept:.4f}")
        if self.reject is not None and p <= self.reject:
            return Fused(p, Verdict.reject, f"fused p {p:.4f} <= live-certified reject {self.reject:.4f}; {why}")
        return Fused(p, Verdict.review, f"fused p {p:.4f} needs review (live-certified thresholds); {why}")

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        meta = {"format": CERTIFIED_FORMAT, "base": self.base_artefact, "accept": self.accept,
                "reject": self.reject, "certificate": self.live_certificate}
        (directory / CERTIFIED_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
        return directory

    @staticmethod
    def read(directory: Path) -> dict[str, Any]:
        meta: dict[str, Any] = json.loads((directory / CERTIFIED_FILE).read_text(encoding="utf-8"))
        if meta.get("format") != CERTIFIED_FORMAT:
            raise ValueError(f"{directory}: unknown format {meta.get('format')!r}, expected {CERTIFIED_FORMAT}")
        return meta
