"""Image evidence with a tiny randomly initialised CLIP the test builds and saves itself."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from PIL import Image

from factloom.verify.base import Claim
from factloom.verify.image_evidence import ImageEvidenceVerifier

CLAIM = Claim(submission_id="s", fact_id="f", subject="Eiffel Tower", predicate="located_in", object="Paris")


def test_tiny_clip_scores_an_image(tiny_clip: Path, tmp_path: Path) -> None:
    image = tmp_path / "img.png"
    Image.new("RGB", (40, 40), (200, 10, 10)).save(image)
    v = ImageEvidenceVerifier(tiny_clip, lambda c: image)
    [r] = v.check([CLAIM], {}, datetime.now(UTC))
    assert r.probability is not None and 0.0 <= r.probability <= 1.0
    assert r.model_version == f"clip:{tiny_clip.name}" and "Eiffel Tower" in r.explanation
    [none] = ImageEvidenceVerifier(tiny_clip, lambda c: None).check([CLAIM], {}, datetime.now(UTC))
    assert none.probability is None and none.explanation == "no image attached"


def test_abstains_without_a_model(tmp_path: Path) -> None:
    [r] = ImageEvidenceVerifier(None, lambda c: tmp_path / "x.png").check([CLAIM], {}, datetime.now(UTC))
    assert r.probability is None and "no image model" in r.explanation
    with pytest.raises(FileNotFoundError):
        ImageEvidenceVerifier(tmp_path, lambda c: None)


def test_a_batch_scores_each_image_as_alone_and_an_unreadable_one_abstains_alone(
    tiny_clip: Path, tmp_path: Path
) -> None:
    colours = {"Paris": (200, 10, 10), "Rome": (10, 200, 10), "Lyon": (10, 10, 200)}
    for name, colour in colours.items():
        Image.new("RGB", (40, 40 + len(name)), colour).save(tmp_path / f"{name}.png")
    (tmp_path / "Oslo.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    claims = [Claim(submission_id=n, fact_id=n, subject="Eiffel Tower", predicate="located_in", object=n)
              for n in [*colours, "Oslo"]]
    now = datetime.now(UTC)
    batched = ImageEvidenceVerifier(tiny_clip, lambda c: tmp_path / f"{c.object}.png", batch_size=2)
    *scored, broken = batched.check(claims, {}, now)
    alone = [batched.check([c], {}, now)[0] for c in claims[:3]]
    for b, a in zip(scored, alone, strict=True):
        assert b.probability is not None and a.probability is not None
        assert abs(b.probability - a.probability) < 1e-5
        assert b.explanation.split(" (p")[0] == a.explanation.split(" (p")[0]
    assert len({round(r.probability or 0.0, 6) for r in scored}) == 3  # three images, three scores, not one shared
    assert broken.probability is None and broken.explanation.startswith("image not readable")
    assert broken.details == {"image": "Oslo.png", "error": True}
