"""Optional: a local causal language model turns an answer and its path into one sentence."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from factloom.model.pathrank import Answer

__all__ = ["Verbaliser", "prompt_for"]


def prompt_for(question: str, answer: Answer) -> str:
    """The facts of the best path, then the question, then the start of the answer sentence."""
    facts = "; ".join(f"{s.subject} {s.predicate.replace('_', ' ')} {s.object}" for s in (answer.paths or [[]])[0])
    return f"Facts: {facts}.\nQuestion: {question}\nAnswer in one sentence: {answer.name}"


class Verbaliser:
    """A causal LM from a local directory (``transformers``, ``local_files_only``; never the hub).

    Args:
        path: a directory holding a model and tokenizer saved with ``save_pretrained``.
        device: ``cpu``, ``cuda``…
        max_new_tokens: length of the generated continuation (32).
    """

    def __init__(self, path: str | Path, device: str = "cpu", max_new_tokens: int = 32) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        directory = Path(path)
        if not directory.is_dir():
            raise FileNotFoundError(f"verbaliser model directory {directory} does not exist")
        self.path = directory
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        model: Any = AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True)
        self.model: Any = model.to(device).eval()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={str(self.path)!r}, max_new_tokens={self.max_new_tokens})"

    def sentence(self, question: str, answer: Answer) -> str:
        import torch

        prompt = prompt_for(question, answer)
        with self._lock, torch.no_grad():
            inputs = self.tokenizer(prompt, return_tensors="pt").to(self.device)
            pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
                else self.tokenizer.eos_token_id
            out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False,
                                      pad_token_id=pad)
        continuation = self.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        return (answer.name + continuation).strip().split("\n")[0]
