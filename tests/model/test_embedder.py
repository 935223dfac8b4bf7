from __future__ import annotations

import numpy as np
import pytest

from factloom.model.embedder import Embedder, default_model_path


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(None, device="cpu")


def test_default_model_is_bundled() -> None:
    assert (default_model_path() / "modules.json").exists()


def test_shape_dtype_and_normalisation(embedder: Embedder) -> None:
    vectors = embedder.encode(["directed by", "who directed Blade Runner", "Ridley Scott"])
    assert vectors.shape == (3, embedder.dimension) == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)
    assert embedder.version == "all-MiniLM-L6-v2"


def test_cache_and_batching_agree(embedder: Embedder) -> None:
    texts = ["the director of a film", "a film's release year", "the director of a film"]
    first = embedder.encode(texts)
    again = embedder.encode(texts[::-1], batch_size=1)
    np.testing.assert_allclose(first, again[::-1], atol=1e-5)
    np.testing.assert_allclose(first[0], first[2])


def test_embed_returns_lists_and_meaning(embedder: Embedder) -> None:
    rows = embedder.embed(["who directed the movie", "directed by", "release year"])
    assert isinstance(rows[0], list) and len(rows[0]) == 384
    q, directed, year = (np.array(r) for r in rows)
    assert q @ directed > q @ year


def test_missing_path_fails_loudly() -> None:
    with pytest.raises(FileNotFoundError):
        Embedder("/nonexistent/model", device="cpu")


def test_tokens_in_bf16_match_fp32(embedder: Embedder) -> None:
    texts = ["who directed the films written by [Ridley Scott]", "release year"]
    ref = embedder.encode_with_tokens(texts)
    low = embedder.encode_with_tokens(texts, precision="bf16")
    for (v32, t32), (v16, t16) in zip(ref, low, strict=True):
        assert v16.dtype == t16.dtype == np.float32 and t16.shape == t32.shape and v16.shape == (384,)
        assert float(v32 @ v16) > 0.99
        assert np.linalg.norm(t16 - t32) / np.linalg.norm(t32) < 0.05
    # the stored vectors stay fp32: encode() is untouched by the bf16 copy
    np.testing.assert_allclose(embedder.encode(texts[:1])[0], ref[0][0], atol=1e-5)
    with pytest.raises(ValueError, match="unknown precision"):
        embedder.encode_with_tokens(texts, precision="int4")


def test_token_embeddings_are_cached_per_text_and_precision(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = ["who directed", "the films that share actors with were released in which years", "who directed"]
    fresh = Embedder(None, device="cpu", token_cache_size=0).encode_with_tokens(texts)
    encoded: list[str] = []
    model_encode = embedder._model.encode

    def counting(todo: list[str], **kwargs: object) -> object:
        encoded.extend(todo)
        return model_encode(todo, **kwargs)

    monkeypatch.setattr(embedder._model, "encode", counting)
    first = embedder.encode_with_tokens(texts)
    assert encoded == texts[:2]  # the repeated text is encoded once
    first[0][1][:] = 0.0  # a caller writing to its copy does not reach the cache
    again = embedder.encode_with_tokens(texts[::-1])
    assert encoded == texts[:2]  # all from the cache
    for (v, t), (fv, ft) in zip(again[::-1], fresh, strict=True):
        np.testing.assert_allclose(v, fv, atol=1e-5)
        np.testing.assert_allclose(t, ft, atol=1e-5)
    low = embedder.encode_with_tokens(texts[:1], precision="bf16")  # another precision, another entry
    assert encoded == texts[:2] and not np.array_equal(low[0][1], again[2][1])
    embedder.encode_with_tokens(texts[:1], cache=False)  # what times the model runs the model
    assert encoded == [*texts[:2], texts[0]]
