"""Image evidence: image–claim agreement by a local CLIP checkpoint (Radford et al. 2021, arXiv:2103.00020).

The model is loaded only from a local directory (``transformers`` ``CLIPModel`` + ``CLIPProcessor``
saved with ``save_pretrained``); nothing is downloaded. The claim's caption is scored against the
image and against a neutral caption, and the softmax over the two logits is the probability

.. math::
    p = \\frac{e^{s(I, c)}}{e^{s(I, c)} + e^{s(I, c_0)}}

With no model configured, or no image attached, the verifier abstains.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from factloom.verify.base import Claim, GraphView, VerifierResult
from factloom.verify.text_evidence import verbalise

__all__ = ["ImageEvidenceVerifier"]

NEUTRAL = "a photo of something unrelated"


class ImageEvidenceVerifier:
    """Args:
        model_path: a local CLIP checkpoint directory, or ``None`` to abstain on every claim.
        image_of: claim → path of its stored image, or ``None`` when it has none.
        device: torch device.
    """

    name = "image_evidence"

    def __init__(
        self, model_path: str | Path | None, image_of: Callable[[Claim], Path | None], device: str = "cpu"
    ) -> None:
        self.image_of, self.device = image_of, device
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
        import torch
        from PIL import Image

        out = []
        for claim in claims:
            image_path = self.image_of(claim)
            if self.model is None or self.processor is None or image_path is None:
                why = "no image model configured" if self.model is None else "no image attached"
                out.append(VerifierResult(self.name, None, why, model_version=self.version))
                continue
            with Image.open(image_path) as im:
                image = im.convert("RGB")
            caption = verbalise(claim)
            inputs = self.processor(text=[caption, NEUTRAL], images=image, return_tensors="pt", padding=True)
            with torch.inference_mode():
                logits = self.model(**{k: v.to(self.device) for k, v in inputs.items()}).logits_per_image  # (1, 2)
            p = float(logits.softmax(dim=-1)[0, 0])
            verb = "agrees" if p >= 0.5 else "does not agree"
            out.append(VerifierResult(self.name, p, f"image {verb} with '{caption}' (p {p:.2f})", score=p,
                                      details={"image": image_path.name}, model_version=self.version))
        return out
