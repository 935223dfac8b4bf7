"""Image evidence with a tiny randomly initialised CLIP the test builds and saves itself."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from PIL import Image

from factloom.verify.base import Claim
from factloom.verify.image_evidence import ImageEvidenceVerifier

CLAIM = Claim(submission_id="s", fact_id="f", subject="Eiffel Tower", predicate="located_in", object="Paris")


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import (
        CLIPConfig,
        CLIPImageProcessor,
        CLIPModel,
        CLIPProcessor,
        CLIPTextConfig,
        CLIPTokenizerFast,
        CLIPVisionConfig,
    )

    path = tmp_path_factory.mktemp("tiny-clip")
    letters = {f"{c}</w>": i + 2 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, **letters}
    (path / "vocab.json").write_text(json.dumps(vocab))
    (path / "merges.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizerFast(vocab_file=str(path / "vocab.json"), merges_file=str(path / "merges.txt"))
    text = CLIPTextConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, max_position_embeddings=32, projection_dim=8,
                          bos_token_id=0, eos_token_id=1, pad_token_id=1)
    vision = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                              image_size=32, patch_size=16, projection_dim=8)
    model = CLIPModel(CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=8))
    model.save_pretrained(path)
    CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                     crop_size={"height": 32, "width": 32}),
                  tokenizer=tok).save_pretrained(path)
    return path


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
