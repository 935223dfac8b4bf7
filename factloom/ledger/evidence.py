"""Evidence files submitted with facts, stored on disk by content hash beside the SQL ledger.

An image is kept once per SHA-256 of its bytes (``images/ab/abcdef….png`` under the evidence
directory); the submission's ``evidence`` JSON keeps the hash, the declared type and the size, and a
worker finds the file again from those. The declared type must match the bytes' magic numbers.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

__all__ = ["IMAGE_TYPES", "InvalidEvidence", "check_image", "image_path", "sniff_image", "store_image"]

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
