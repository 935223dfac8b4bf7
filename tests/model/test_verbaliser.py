"""The verbaliser's real transformers loading code, on a tiny random model the test builds."""

from __future__ import annotations

from pathlib import Path

from factloom.model.pathrank import Answer, PathStep
from factloom.model.verbaliser import Verbaliser, prompt_for


def tiny_model(directory: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["facts", "question", "answer", "in", "one", "sentence", "anna", "spouse", "bob", "place",
             "of", "birth", "york", "where", "was", "the", "born"]
    vocab = {w: i for i, w in enumerate(["[UNK]", "[EOS]", *words, ":", ".", ";", "?"])}
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", eos_token="[EOS]")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_positions=128, n_embd=16, n_layer=1, n_head=2))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_verbaliser_loads_a_local_model_and_writes_a_sentence(tmp_path: Path) -> None:
    answer = Answer("e1", "york", 1.0, [[PathStep("f0", "anna", "spouse", "bob"),
                                         PathStep("f3", "bob", "place_of_birth", "york")]])
    assert "anna spouse bob; bob place of birth york" in prompt_for("where was the spouse of anna born", answer)
    verbaliser = Verbaliser(tiny_model(tmp_path / "lm"), max_new_tokens=5)
    text = verbaliser.sentence("where was the spouse of anna born", answer)
    assert text.startswith("york") and "\n" not in text
    assert "max_new_tokens=5" in repr(verbaliser)
