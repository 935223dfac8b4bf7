"""Evidence submitted with facts: images on disk by content hash beside the SQL ledger, texts in it.

An image is kept once per SHA-256 of its bytes (``images/ab/abcdef….png`` under the evidence
directory); the submission's ``evidence`` JSON keeps the hash, the declared type and the size, and a
worker finds the file again from those. The declared type must match the bytes' magic numbers.

An evidence text stays in the submission's ``evidence`` JSON (``{"text": …}``). :func:`stored_texts`
finds the texts of a kb's judged-true submissions (accepted, reviewed, committed) that name given
entities as subject or object, the most recent first and at most ``per_entity`` per entity: the
"stored evidence about the entities" a fact submitted without text is checked against.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select

from factloom.ledger.db import Database
from factloom.ledger.tables import FactSubmission, Status

__all__ = [
    "IMAGE_TYPES", "EvidenceText", "InvalidEvidence", "check_image", "image_path", "sniff_image", "store_image",
    "has_stored_texts", "stored_texts",
]

# content type → file extension; the only image types an upload may declare
IMAGE_TYPES = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}


class InvalidEvidence(ValueError):
    """Evidence bytes that are not what they claim to be."""


def sniff_image(data: bytes) -> str | None:
    """The image type the magic numbers say (one of :data:`IMAGE_TYPES`), or ``None``."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_image(data: bytes, content_type: str) -> str:
    """The bytes' SHA-256 when they are an image of the declared type; else :class:`InvalidEvidence`."""
    if content_type not in IMAGE_TYPES:
        raise InvalidEvidence(f"image content_type must be one of {', '.join(IMAGE_TYPES)}, not {content_type!r}")
    found = sniff_image(data)
    if found != content_type:
        what = f"a {found} image" if found else "not a PNG, JPEG or WebP image"
        raise InvalidEvidence(f"the image is declared {content_type} but its bytes are {what}")
    return hashlib.sha256(data).hexdigest()


def image_path(evidence_dir: Path, sha256: str, content_type: str) -> Path:
    if len(sha256) != 64 or not all(c in "0123456789abcdef" for c in sha256):
        raise InvalidEvidence(f"not a SHA-256 hex digest: {sha256!r}")
    return evidence_dir / "images" / sha256[:2] / f"{sha256}.{IMAGE_TYPES[content_type]}"


def store_image(evidence_dir: Path, data: bytes, content_type: str) -> str:
    """Write the image once under its hash (atomically: a reader never sees half a file); its SHA-256."""
    sha = check_image(data, content_type)
    path = image_path(evidence_dir, sha, content_type)
    if path.exists():
        return sha
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return sha


# a submission whose evidence may stand for its entities: one the checks or a reviewer judged true
_JUDGED_TRUE = (Status.accepted, Status.reviewed, Status.committed)


@dataclass(frozen=True, slots=True)
class EvidenceText:
    """The evidence text of one stored submission, found under the entity name ``entity``."""

    entity: str
    submission_id: str
    fact_id: str
    text: str


def _folds(name: str) -> tuple[str, str]:
    # PostgreSQL's lower() folds all of Unicode, SQLite's only ASCII: look a name up under both
    return name.lower(), "".join(ch.lower() if ch.isascii() else ch for ch in name)


def has_stored_texts(db: Database, kb: str) -> bool:
    """Whether the kb holds any judged-true submission with an evidence text (one ``LIMIT 1`` query)."""
    text = FactSubmission.evidence["text"].as_string()
    with db.session() as session:
        hit = session.execute(
            select(FactSubmission.id).where(FactSubmission.kb == kb, FactSubmission.status.in_(_JUDGED_TRUE),
                                            text.is_not(None), text != "").limit(1)
        ).first()
    return hit is not None


def stored_texts(db: Database, kb: str, names: Iterable[str], *, per_entity: int = 4) -> dict[str, list[EvidenceText]]:
    """Per given name (matched case-insensitively as subject or object), the evidence texts of the kb's
    judged-true submissions, most recent first, at most ``per_entity`` for each side it appears on.

    Two queries (subject side, object side), each bounded in SQL by a ``row_number()`` window, so a
    name with thousands of stored facts costs no more than one with a few."""
    wanted = sorted({n for n in names if n and n.strip()})
    by_fold: dict[str, list[str]] = {}
    for name in wanted:
        for fold in set(_folds(name)):
            by_fold.setdefault(fold, []).append(name)
    if not by_fold or per_entity <= 0:
        return {}
    text = FactSubmission.evidence["text"].as_string()
    found: dict[str, dict[str, tuple[datetime, EvidenceText]]] = {}
    with db.session() as session:
        for column in (FactSubmission.subject, FactSubmission.object):
            key = func.lower(column)
            ranked = (
                select(FactSubmission.id, FactSubmission.fact_id, FactSubmission.created_at,
                       key.label("entity"), text.label("text"),
                       func.row_number().over(partition_by=key,
                                              order_by=(FactSubmission.created_at.desc(), FactSubmission.id))
                       .label("rank"))
                .where(FactSubmission.kb == kb, FactSubmission.status.in_(_JUDGED_TRUE),
                       key.in_(sorted(by_fold)), text.is_not(None), text != "")
                .subquery()
            )
            rows = session.execute(
                select(ranked.c.id, ranked.c.fact_id, ranked.c.created_at, ranked.c.entity, ranked.c.text)
                .where(ranked.c.rank <= per_entity)
            ).all()
            for sid, fact_id, created, entity, body in rows:
                for name in by_fold.get(entity, ()):
                    found.setdefault(name, {})[sid] = (created, EvidenceText(name, sid, fact_id, body))
    return {name: [e for _, e in sorted(hits.values(), key=lambda h: h[0], reverse=True)]
            for name, hits in found.items()}
