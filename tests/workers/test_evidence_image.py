"""Image evidence through the real Celery worker: a worker configured with a tiny random CLIP checkpoint
(built and saved by the test) scores an image uploaded with a fact, and the API returns the result."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from factloom.ledger import Database
from factloom.platform.process import Service
from tests.support.api import checked, submission_ids
from tests.support.data import image_fact, png

pytestmark = pytest.mark.integration


def checked_image(api: httpx.Client, db: Database, kb: str, data: bytes) -> dict[str, Any]:
    """Post one fact with ``data`` as its image and wait until the worker has judged it, whatever the verdict."""
    image = {"content_type": "image/png", "data": base64.b64encode(data).decode()}
    response = api.post("/v1/facts", json={"kb": kb, "facts": [image_fact(image)]})
    assert response.status_code == 202, response.text
    (sid,) = submission_ids(db, response.json()["batch_id"])
    return checked(api, sid, timeout=120.0)


def test_the_worker_scores_an_uploaded_image_with_a_configured_clip(
    api: httpx.Client, db: Database, tiny_clip: Path,  # noqa: F811
    worker_with: Callable[..., AbstractContextManager[Service]],
) -> None:
    data = png((10, 200, 10))
    with worker_with(image_model_path=str(tiny_clip)):
        item = checked_image(api, db, "ev-img-worker", data)
    image = next(c for c in item["checks"] if c["verifier"] == "image_evidence")
    assert image["probability"] is not None and 0.0 <= image["probability"] <= 1.0
    assert image["model_version"] == f"clip:{tiny_clip.name}"
    assert "Eiffel Tower located in Paris" in image["explanation"]
    assert image["details"]["image"] == f"{hashlib.sha256(data).hexdigest()}.png"
    fusion = item["fusion"]
    assert "image_evidence" not in fusion["abstained"]
    assert fusion["versions"]["image_evidence"] == f"clip:{tiny_clip.name}"
    assert fusion["probability"] <= image["probability"]  # the min rule: the image's doubt counts

    # the session's own worker (no image model) is back
    item = checked_image(api, db, "ev-img-worker-after", png((10, 10, 200)))
    image = next(c for c in item["checks"] if c["verifier"] == "image_evidence")
    assert image["probability"] is None and image["explanation"] == "no image model configured"
