"""What a scorer's training facts say beside its embeddings: the known answers that filtered ranks
leave out, and how often entities and (relation, entity) pairs occur (the frequency features of
:data:`factloom.model.scorer.FEATURE_NAMES`)."""

from __future__ import annotations

import numpy as np

__all__ = ["KnownFacts"]


class KnownFacts:
    """Lookups over known facts by id, rebuilt whenever the facts or the vocabularies change.

    Args:
        known: the facts, ``(N, 3)`` rows of ``(head, relation, tail)`` ids.
        n_ent: entities in the vocabulary.
        n_rel: relations in the vocabulary (forward ids; the reciprocal of ``r`` is ``r + n_rel``).
    """

    def __init__(self, known: np.ndarray, n_ent: int, n_rel: int) -> None:
        self.n_rel = n_rel
        k = known
        # key h * 2R + r -> known tails (reciprocal r: known heads), as runs of equal keys in sorted order
        keys = np.concatenate([k[:, 0] * 2 * n_rel + k[:, 1], k[:, 2] * 2 * n_rel + k[:, 1] + n_rel])
        vals = np.concatenate([k[:, 2], k[:, 0]])
        order = np.argsort(keys, kind="stable")
        self._keys, self._answers = keys[order], vals[order]
        self.degree = np.bincount(np.concatenate([k[:, 0], k[:, 2]]), minlength=n_ent).astype(np.float64)
        self.head_rel = np.bincount(k[:, 0] * n_rel + k[:, 1], minlength=n_ent * n_rel).astype(np.float64)
        self.rel_tail = np.bincount(k[:, 2] * n_rel + k[:, 1], minlength=n_ent * n_rel).astype(np.float64)
        facts = np.bincount(k[:, 1], minlength=n_rel).astype(np.float64)
        heads = np.bincount(np.flatnonzero(self.head_rel) % n_rel, minlength=n_rel)
        tails = np.bincount(np.flatnonzero(self.rel_tail) % n_rel, minlength=n_rel)
        self.tails_per_head = facts / np.maximum(heads, 1)  # how far from functional each relation is
        self.heads_per_tail = facts / np.maximum(tails, 1)

    def answers(self, q: int, r: int) -> np.ndarray | None:
        """The known tails of ``(q, r, ?)``; with a reciprocal ``r``, the known heads of ``(?, r - n_rel, q)``."""
        key = q * 2 * self.n_rel + r
        lo, hi = np.searchsorted(self._keys, key, "left"), np.searchsorted(self._keys, key, "right")
        return self._answers[lo:hi] if hi > lo else None

    def frequencies(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Per fact ``(N, 3)`` the frequency columns of ``FEATURE_NAMES``, each ``(N,)``."""
        n_rel = self.n_rel
        h, r, t = ids[:, 0], ids[:, 1], ids[:, 2]
        return {
            "log_head_degree": np.log1p(self.degree[h]), "log_tail_degree": np.log1p(self.degree[t]),
            "log_head_rel": np.log1p(self.head_rel[h * n_rel + r]),
            "log_rel_tail": np.log1p(self.rel_tail[t * n_rel + r]),
            "log_tails_per_head": np.log(np.maximum(self.tails_per_head[r], 1.0)),
            "log_heads_per_tail": np.log(np.maximum(self.heads_per_tail[r], 1.0)),
        }
