"""Image evidence: image–claim agreement by a local CLIP checkpoint (Radford et al. 2021, arXiv:2103.00020).

The model is loaded only from a local directory (``transformers`` ``CLIPModel`` + ``CLIPProcessor``
saved with ``save_pretrained``); nothing is downloaded. The claim's caption is scored against the
image and against a neutral caption, and the softmax over the two logits is the probability

.. math::
    p = \\frac{e^{s(I, c)}}{e^{s(I, c)} + e^{s(I, c_0)}}

The images of a call go through the model in batches of ``batch_size`` (one forward pass scores
every image of a batch against every caption of it; each image's two logits are picked out of that
``(images, captions)`` matrix). With no model configured, or no image attached, the verifier
abstains; an image that cannot be read abstains alone, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from factloom.verify.base import Claim, GraphView, VerifierResult
from factloom.verify.text_evidence import verbalise

__all__ = ["ImageEvidenceVerifier"]

NEUTRAL = "a photo of something unrelated"


class ImageEvidenceVerifier:
    """Args:
        model_path: a local CLIP checkpoint directory, or ``None`` to abstain on every claim.
        image_of: claim → path of its stored image, or ``None`` when it has none.
        device: torch device.
        batch_size: images per forward pass.
    """

    name = "image_evidence"

    def __init__(
        self, model_path: str | Path | None, image_of: Callable[[Claim], Path | None], device: str = "cpu",
        batch_size: int = 16,
    ) -> None:
        self.image_of, self.device, self.batch_size = image_of, device, batch_size
        self.model = self.processor = None
        self.version = "none"
        if model_path is not None:
            from transformers import CLIPModel, CLIPProcessor

            path = Path(model_path)
            if not (path / "config.json").exists():
                raise FileNotFoundError(f"no CLIP checkpoint at {path}")
            model = CLIPModel.from_pretrained(str(path), local_files_only=True)
            self.model = model.to(device).eval()  # type: ignore[arg-type]
            self.processor = CLIPProcessor.from_pretrained(str(path), local_files_only=True)
            self.version = f"clip:{path.name}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(version={self.version!r})"

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        out: list[VerifierResult | None] = [None] * len(claims)
        todo: list[tuple[int, Path, Any]] = []  # (claim index, path, RGB image)
        for i, claim in enumerate(claims):
            image_path = self.image_of(claim)
            if self.model is None or self.processor is None or image_path is None:
                why = "no image model configured" if self.model is None else "no image attached"
                out[i] = VerifierResult(self.name, None, why, model_version=self.version)
                continue
            try:
                todo.append((i, image_path, _load_rgb(image_path)))
            except OSError as exc:  # a missing or unreadable file: this claim abstains, the others are scored
                out[i] = VerifierResult(self.name, None, f"image not readable: {type(exc).__name__}: {exc}"[:300],
                                        details={"image": image_path.name, "error": True}, model_version=self.version)
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start:start + self.batch_size]
            for (i, image_path, _), p in zip(batch, self._score(claims, batch), strict=True):
                caption = verbalise(claims[i])
                verb = "agrees" if p >= 0.5 else "does not agree"
                out[i] = VerifierResult(self.name, p, f"image {verb} with '{caption}' (p {p:.2f})", score=p,
                                        details={"image": image_path.name}, model_version=self.version)
        return [r for r in out if r is not None]

    def _score(self, claims: Sequence[Claim], batch: Sequence[tuple[int, Path, Any]]) -> list[float]:
        """One forward pass: P(caption) against the neutral caption for each image of the batch."""
        import torch

        assert self.model is not None and self.processor is not None
        captions = list(dict.fromkeys([*(verbalise(claims[i]) for i, _, _ in batch), NEUTRAL]))
        longest = self.model.config.text_config.max_position_embeddings  # a longer caption is cut, not an error
        inputs = self.processor(text=captions, images=[im for _, _, im in batch], return_tensors="pt",
                                padding=True, truncation=True, max_length=longest)
        with torch.inference_mode():
            logits = self.model(**{k: v.to(self.device) for k, v in inputs.items()}).logits_per_image  # (B, T)
        mine = torch.tensor([captions.index(verbalise(claims[i])) for i, _, _ in batch])  # (B,)
        rows = torch.arange(len(batch))
        pair = torch.stack([logits[rows, mine], logits[:, captions.index(NEUTRAL)]], dim=-1)  # (B, 2)
        return [float(p) for p in pair.softmax(dim=-1)[:, 0].cpu()]


def _load_rgb(path: Path) -> Any:
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")
