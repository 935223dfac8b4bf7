"""Evidence images: uploaded as base64, checked for type and size, stored by content hash, never fetched."""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from sqlalchemy import func, select

from factloom.config import Settings
from factloom.ledger import Database, FactSubmission, IngestBatch
from factloom.platform.ingest import service as ingest
from factloom.platform.ingest.schemas import FactIn
from factloom.workers import pipeline
from factloom.workers.context import WorkerContext
from tests.support.api import submission_ids, wait_status
from tests.support.data import image_fact, png

pytestmark = pytest.mark.integration


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (0, 0, 255)).save(out, format="JPEG")
    return out.getvalue()


def stored_files(settings: Settings) -> list[Path]:
    root = settings.evidence_dir / "images"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def counts(db: Database, kb: str) -> tuple[int, int]:
    with db.session() as session:
        subs = session.scalar(select(func.count()).select_from(FactSubmission).where(FactSubmission.kb == kb))
        batches = session.scalar(select(func.count()).select_from(IngestBatch).where(IngestBatch.kb == kb))
    return int(subs or 0), int(batches or 0)


def test_an_uploaded_image_is_stored_once_by_its_hash(api: httpx.Client, db: Database, settings: Settings) -> None:
    kb = "img-ok"
    data = png()
    sha = hashlib.sha256(data).hexdigest()
    image = {"content_type": "image/png", "data": base64.b64encode(data).decode()}
    response = api.post("/v1/facts", json={"kb": kb, "facts": [image_fact(image), image_fact(image, obj="France")]})
    assert response.status_code == 202, response.text
    first, second = submission_ids(db, response.json()["batch_id"])
    item = wait_status(api, first, "committed")
    assert item["evidence"]["image"] == {"sha256": sha, "content_type": "image/png", "bytes": len(data)}
    assert "data" not in item["evidence"]["image"]  # the ledger keeps the hash, never the bytes
    path = settings.evidence_dir / "images" / sha[:2] / f"{sha}.png"
    assert path.read_bytes() == data
    assert [p for p in stored_files(settings) if p.name.startswith(sha)] == [path]  # two facts, one file
    image_check = next(c for c in item["checks"] if c["verifier"] == "image_evidence")
    assert image_check["probability"] is None and image_check["explanation"] == "no image model configured"
    wait_status(api, second, "committed")


@pytest.mark.parametrize(
    ("image", "status", "words"),
    [
        ({"content_type": "image/png", "data": base64.b64encode(jpeg()).decode()}, 400, "image/jpeg"),
        ({"content_type": "image/webp", "data": base64.b64encode(b"GIF89a" + bytes(64)).decode()}, 400,
         "not a PNG, JPEG or WebP"),
        ({"content_type": "image/png", "data": "not base64!"}, 400, "base64"),
        ({"content_type": "image/png", "data": base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(2_100_000)).decode()},
         413, "at most"),
        ({"content_type": "image/png", "data": "https://example.org/cat.png"}, 422, "never fetches URLs"),
        ({"content_type": "image/png", "url": "https://example.org/cat.png"}, 422, "never fetches URLs"),
        ({"content_type": "image/gif", "data": "R0lGODlh"}, 422, "image/png"),
    ],
)
def test_a_bad_image_refuses_the_whole_batch_and_writes_nothing(
    api: httpx.Client, db: Database, settings: Settings, image: dict[str, Any], status: int, words: str
) -> None:
    kb = "img-bad"
    files = stored_files(settings)
    good = {"content_type": "image/png", "data": base64.b64encode(png((1, 2, 3))).decode()}
    response = api.post("/v1/facts", json={"kb": kb, "facts": [image_fact(good, obj="Lyon"), image_fact(image)]})
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert words in response.json()["detail"]
    assert counts(db, kb) == (0, 0)
    assert stored_files(settings) == files  # not even the batch's good image


def test_an_image_url_in_the_evidence_is_refused(api: httpx.Client, db: Database) -> None:
    body = {"kb": "img-url", "facts": [image_fact(None, text="see photo", image_url="http://example.org/x.png")]}
    response = api.post("/v1/facts", json=body)
    assert response.status_code == 422 and response.headers["content-type"] == "application/problem+json"
    assert "never fetches URLs" in response.json()["detail"]
    assert counts(db, "img-url") == (0, 0)


def test_the_check_step_hands_the_stored_image_to_a_configured_clip(
    live: object, db: Database, settings: Settings, tiny_clip: Path  # noqa: F811
) -> None:
    """The real check step (ledger, Neo4j, stored file) with a CLIP checkpoint configured."""
    data = png((10, 200, 10))
    payload = FactIn.model_validate(image_fact({"content_type": "image/png", "data": base64.b64encode(data).decode()}))
    submitted = ingest.submit(db=db, kb="img-clip", facts=[payload], max_facts=10, api_key_id=None,
                              evidence_dir=settings.evidence_dir, max_image_bytes=settings.max_image_bytes)
    ctx = WorkerContext(settings.model_copy(update={"image_model_path": str(tiny_clip)}))
    try:
        pipeline.check_submissions(ctx, submitted.ids)
        with db.session() as session:
            row = session.get(FactSubmission, submitted.ids[0])
            assert row is not None
            checks = {c.verifier: c for c in row.checks}
    finally:
        ctx.store.close()
        ctx.db.dispose()
    image_check = checks["image_evidence"]
    assert image_check.probability is not None and 0.0 <= image_check.probability <= 1.0
    assert image_check.model_version == f"clip:{tiny_clip.name}" and "Eiffel Tower" in image_check.explanation
    assert (image_check.details or {})["image"] == f"{hashlib.sha256(data).hexdigest()}.png"
