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
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch_geometric.data import Batch, Data

from factloom.graph.types import Edge, RelationKey, Subgraph

__all__ = ["RelationKey", "Sample", "RelationFeatures", "humanise", "make_sample", "collate", "Collated",
           "question_features", "question_inputs", "questions_inputs", "question_tensors", "weak_relations",
           "path_reaches", "SEGMENTS"]

# possessive segments encoded beside the whole question ("X 's spouse 's father 's birthplace");
# off: on PQ-3H (1000 training questions) dev hits@1 fell from 0.78 to 0.72 with 4 of them
SEGMENTS = 0
_POSSESSIVE = re.compile(r"\s*'s\b\s*")

Encode = Callable[[list[str]], npt.NDArray[np.float32]]


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
    qtok: npt.NDArray[np.float32] | None = None  # (L, D) the question's token embeddings
    relations: list[RelationKey] = field(default_factory=list)  # gold relation of each hop (training only)


def question_features(encode: Encode, question: str, mentions: Sequence[str]) -> npt.NDArray[np.float32]:
    """The question's relation words (entity mentions removed) and, in order, up to
    :data:`SEGMENTS` of its possessive segments, embedded in one encoder call.

    A pooled sentence embedding barely tells "the mother's children" from "the children's mother";
    the ordered segments do. Shapes: ``((1 + SEGMENTS) · D,)``.
    """
    from factloom.graph.mentions import strip_mentions

    text = strip_mentions(question, mentions) or question
    segments = [p.strip(" ?.") for p in _POSSESSIVE.split(text) if p.strip(" ?.")][:SEGMENTS]
    vectors = encode([text, *segments])  # (1 + S', D)
    out = np.zeros((1 + SEGMENTS, vectors.shape[1]), dtype=np.float32)  # (1 + S, D)
    out[: len(vectors)] = vectors
    return out.reshape(-1)


def question_inputs(embedder: Any, question: str,
                    mentions: Sequence[str]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """The question's relation words (entity mentions removed): sentence embedding ``(D,)`` and
    token embeddings ``(L, D)`` from one encoder call. The reasoner attends over the tokens once
    per hop, so "the mother's children" and "the children's mother" give different hop orders."""
    return questions_inputs(embedder, [question], [mentions])[0]


def questions_inputs(embedder: Any, questions: Sequence[str], mentions: Sequence[Sequence[str]],
                     precision: str = "fp32", cache: bool = True,
                     ) -> list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]]:
    """:func:`question_inputs` of many questions in one encoder call (the query batcher's batch),
    the encoder in ``precision`` (:meth:`~factloom.model.embedder.Embedder.encode_with_tokens`;
    ``cache=False``: not from its cache)."""
    from factloom.graph.mentions import strip_mentions

    texts = [strip_mentions(q, m) or q for q, m in zip(questions, mentions, strict=True)]
    return embedder.encode_with_tokens(texts, precision=precision, cache=cache)


def path_reaches(s: Sample, relations: Sequence[RelationKey]) -> bool:
    """Whether following ``relations`` hop by hop from the seeds over the sample's edges reaches an answer."""
    index = {n: i for i, n in enumerate(s.nodes)}
    current = set(s.seeds)
    for predicate, forward in relations:
        current = {index[e.target_id if forward else e.source_id] for e in s.edges if e.predicate == predicate
                   and index[e.source_id if forward else e.target_id] in current}
    return bool(relations) and bool(current & set(s.answers))


def weak_relations(s: Sample, hops: int | None = None, max_hops: int = 3,
                   max_paths: int = 20000) -> list[RelationKey]:
    """Weak supervision for the relation of each hop when the data does not name the path: the
    relation sequence from the seeds whose reached set best matches the answers (F1), of length ``hops`` when the
    hop count is known (MetaQA's question sets), else the shortest that reaches one. Empty when
    nothing reaches an answer or two sequences tie (an ambiguous path teaches nothing).
    """
    if not s.answers or not s.seeds:
        return []
    out_edges: dict[int, list[tuple[RelationKey, int]]] = {}
    index = {n: i for i, n in enumerate(s.nodes)}
    for e in s.edges:
        a, b = index[e.source_id], index[e.target_id]
        out_edges.setdefault(a, []).append(((e.predicate, True), b))
        out_edges.setdefault(b, []).append(((e.predicate, False), a))
    answers = set(s.answers)
    paths: dict[tuple[RelationKey, ...], frozenset[int]] = {(): frozenset(s.seeds)}
    for length in range(1, (hops or max_hops) + 1):
        nxt: dict[tuple[RelationKey, ...], set[int]] = {}
        for path, nodes in paths.items():
            for u in nodes:
                for key, v in out_edges.get(u, ()):
                    nxt.setdefault((*path, key), set()).add(v)
        if len(nxt) > max_paths:
            return []
        paths = {p: frozenset(n) for p, n in nxt.items()}
        if hops is not None and length < hops:
            continue
        # F1 of the reached set against the answers: a path through a hub ("has_genre Drama") reaches
        # every answer among thousands of others, and that is not the question's path
        scored = sorted(((round(2 * len(n & answers) / (len(n) + len(answers)), 6), p)
                         for p, n in paths.items() if n & answers), reverse=True)
        if scored:
            if len(scored) > 1 and scored[0][0] == scored[1][0]:
                return []
            return list(scored[0][1])
    return []


def make_sample(question: str, qvec: npt.NDArray[np.float32], graph: Subgraph,
                answers: Sequence[str] = (), qtok: npt.NDArray[np.float32] | None = None,
                relations: Sequence[RelationKey] = ()) -> Sample:
    nodes = list(dict.fromkeys([s.entity_id for s in graph.seeds]
                               + [n for e in graph.edges for n in (e.source_id, e.target_id)]))
    index = {n: i for i, n in enumerate(nodes)}
    seeds = list(dict.fromkeys(index[s.entity_id] for s in graph.seeds))
    return Sample(question=question, qvec=qvec, nodes=nodes, names=graph.names, edges=list(graph.edges),
                  seeds=seeds, answers=[index[a] for a in dict.fromkeys(answers) if a in index], qtok=qtok,
                  relations=list(relations))


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
    qtok: torch.Tensor  # (B, L, D) token embeddings, zero-padded (a sample without tokens: its qvec)
    qmask: torch.Tensor  # (B, L) true where a token is
    gold: torch.Tensor  # (B, G) index into keys of each hop's gold relation, -1 where unknown
    node_offset: list[int]
    edge_offset: list[int]
    samples: list[Sample]
    # each question's hop instructions ``(B, T, H)`` and token attention ``(B, T, L)`` when the
    # caller already has them (they depend on the question alone); else the model computes them
    instructions: tuple[torch.Tensor, torch.Tensor] | None = None


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
    qvec, qtok, qmask = question_tensors([s.qvec for s in samples], [s.qtok for s in samples])
    hops = max((len(s.relations) for s in samples), default=0)
    gold = torch.full((len(samples), hops), -1, dtype=torch.long)  # (B, G)
    for i, s in enumerate(samples):
        held = {e.predicate for e in s.edges}
        for hop, key in enumerate(s.relations):
            if key[0] in held:  # a gold relation this sample's graph lacks teaches nothing
                gold[i, hop] = keys[key]
    return Collated(batch=batch, rel_feat=features.matrix(key_list), keys=key_list, qvec=qvec, qtok=qtok,
                    qmask=qmask, gold=gold, node_offset=node_offset, edge_offset=edge_offset,
                    samples=list(samples))


def question_tensors(qvecs: Sequence[npt.NDArray[np.float32]], qtoks: Sequence[npt.NDArray[np.float32] | None],
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Questions as batch tensors: ``qvec (B, (1 + S) D)``, zero-padded token embeddings
    ``qtok (B, L, D)`` (a question without tokens: its sentence vector) and ``qmask (B, L)``."""
    qvec = torch.from_numpy(np.stack(qvecs).astype(np.float32))  # (B, (1 + S) D)
    dim = qvecs[0].shape[0] // (1 + SEGMENTS)
    toks = [t if t is not None and len(t) else v[None, :dim] for v, t in zip(qvecs, qtoks, strict=True)]
    width = max(len(t) for t in toks)
    qtok = torch.zeros(len(toks), width, toks[0].shape[1])  # (B, L, D)
    qmask = torch.zeros(len(toks), width, dtype=torch.bool)  # (B, L)
    for i, t in enumerate(toks):
        qtok[i, : len(t)] = torch.from_numpy(np.asarray(t, dtype=np.float32))
        qmask[i, : len(t)] = True
    return qvec, qtok, qmask


def edge_batch(c: Collated) -> torch.Tensor:
    """The sample of each directed edge, ``(E,)``."""
    return c.batch.batch[c.batch.edge_index[0]]
