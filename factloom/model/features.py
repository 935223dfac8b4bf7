"""From a :class:`~factloom.graph.types.Subgraph` to the tensors the router and reasoner read.

Every fact becomes two directed edges, the stored direction and its inverse, each typed by a
*relation key* ``(predicate, forward)``. Relation features are the sentence embedding of the
predicate's words plus a direction bit, so a relation never seen in training still has a feature.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch
from torch_geometric.data import Batch, Data

from factloom.graph.types import Edge, Subgraph

__all__ = ["RelationKey", "Sample", "RelationFeatures", "humanise", "make_sample", "collate", "Collated",
           "question_features", "SEGMENTS"]

# possessive segments encoded beside the whole question ("X 's spouse 's father 's birthplace");
# off: on PQ-3H (1000 training questions) dev hits@1 fell from 0.78 to 0.72 with 4 of them
SEGMENTS = 0
_POSSESSIVE = re.compile(r"\s*'s\b\s*")

Encode = Callable[[list[str]], npt.NDArray[np.float32]]
RelationKey = tuple[str, bool]


def humanise(predicate: str) -> str:
    """``__people__person__place_of_birth`` → ``people person place of birth``."""
    return re.sub(r"[_\s]+", " ", predicate).strip().lower()


@dataclass(slots=True)
class Sample:
    """One question over one subgraph, indexed for tensors (node order = ``nodes``)."""

    question: str
    qvec: npt.NDArray[np.float32]  # (D,)
    nodes: list[str]  # entity ids
    names: dict[str, str]
    edges: list[Edge]  # the facts, stored direction
    seeds: list[int]  # node indices
    answers: list[int] = field(default_factory=list)  # node indices (training only)


def question_features(encode: Encode, question: str, mentions: Sequence[str]) -> npt.NDArray[np.float32]:
    """The question's relation words (entity mentions removed) and, in order, up to
    :data:`SEGMENTS` of its possessive segments, embedded in one encoder call.

    A pooled sentence embedding barely tells "the mother's children" from "the children's mother";
    the ordered segments do. Shapes: ``((1 + SEGMENTS) · D,)``.
    """
    from factloom.graph.linking import strip_mentions

    text = strip_mentions(question, mentions) or question
    segments = [p.strip(" ?.") for p in _POSSESSIVE.split(text) if p.strip(" ?.")][:SEGMENTS]
    vectors = encode([text, *segments])  # (1 + S', D)
    out = np.zeros((1 + SEGMENTS, vectors.shape[1]), dtype=np.float32)  # (1 + S, D)
    out[: len(vectors)] = vectors
    return out.reshape(-1)


def make_sample(question: str, qvec: npt.NDArray[np.float32], graph: Subgraph,
                answers: Sequence[str] = ()) -> Sample:
    nodes = list(dict.fromkeys([s.entity_id for s in graph.seeds]
                               + [n for e in graph.edges for n in (e.source_id, e.target_id)]))
    index = {n: i for i, n in enumerate(nodes)}
    seeds = list(dict.fromkeys(index[s.entity_id] for s in graph.seeds))
    return Sample(question=question, qvec=qvec, nodes=nodes, names=graph.names, edges=list(graph.edges),
                  seeds=seeds, answers=[index[a] for a in dict.fromkeys(answers) if a in index])


class RelationFeatures:
    """Relation key → feature row ``[e(words(predicate)); forward]``, embedded once and cached.

    Shapes:
        - **output of** :meth:`matrix`: ``(R, D + 1)`` for ``R`` keys
    """

    def __init__(self, encode: Encode) -> None:
        self.encode = encode
        self._rows: dict[str, npt.NDArray[np.float32]] = {}
        self._lock = threading.Lock()

    def matrix(self, keys: Sequence[RelationKey]) -> torch.Tensor:
        with self._lock:
            missing = sorted({p for p, _ in keys if p not in self._rows})
            if missing:
                for p, row in zip(missing, self.encode([humanise(p) for p in missing]), strict=True):
                    self._rows[p] = row
            rows = [np.append(self._rows[p], np.float32(1.0 if f else 0.0)) for p, f in keys]
        if not rows:
            return torch.zeros((0, self.encode(["relation"]).shape[1] + 1))
        return torch.from_numpy(np.stack(rows).astype(np.float32))


@dataclass(slots=True)
class Collated:
    """A batch of samples as one disjoint PyG graph.

    ``edge_fact[e]`` is the index into ``samples[b].edges`` of directed edge ``e`` of sample
    ``edge_batch[e]``; the inverse copy of a fact follows its forward copy.
    """

    batch: Batch
    rel_feat: torch.Tensor  # (R, D + 1)
    keys: list[RelationKey]
    qvec: torch.Tensor  # (B, D)
    node_offset: list[int]
    edge_offset: list[int]
    samples: list[Sample]


def collate(samples: Sequence[Sample], features: RelationFeatures) -> Collated:
    keys: dict[RelationKey, int] = {}
    data: list[Data] = []
    for s in samples:
        index = {n: i for i, n in enumerate(s.nodes)}
        src, dst, typ = [], [], []
        for e in s.edges:
            a, b = index[e.source_id], index[e.target_id]
            fwd = keys.setdefault((e.predicate, True), len(keys))
            inv = keys.setdefault((e.predicate, False), len(keys))
            src += [a, b]
            dst += [b, a]
            typ += [fwd, inv]
        seed = torch.zeros(len(s.nodes))
        seed[s.seeds] = 1.0
        answer = torch.zeros(len(s.nodes))
        answer[s.answers] = 1.0
        data.append(Data(edge_index=torch.tensor([src, dst], dtype=torch.long).view(2, -1),
                         edge_type=torch.tensor(typ, dtype=torch.long), seed=seed, answer=answer,
                         num_nodes=len(s.nodes)))
    batch = Batch.from_data_list(data)
    node_offset = np.cumsum([0] + [len(s.nodes) for s in samples]).tolist()
    edge_offset = np.cumsum([0] + [2 * len(s.edges) for s in samples]).tolist()
    key_list = list(keys)
    return Collated(batch=batch, rel_feat=features.matrix(key_list), keys=key_list,
                    qvec=torch.from_numpy(np.stack([s.qvec for s in samples]).astype(np.float32)),
                    node_offset=node_offset, edge_offset=edge_offset, samples=list(samples))


def edge_batch(c: Collated) -> torch.Tensor:
    """The sample of each directed edge, ``(E,)``."""
    return c.batch.batch[c.batch.edge_index[0]]
