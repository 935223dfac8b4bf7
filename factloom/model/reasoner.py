"""The learned reasoner: hop-wise relation attention conditioned on the question, propagated from
the seeds over the router's subgraph; ranks answer entities and yields their reasoning paths."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from factloom.model.features import Collated, edge_batch
from factloom.model.flow import RelationFlowConv
from factloom.model.pathrank import Answer, PathStep

__all__ = ["ReasonerConfig", "PathReasoner", "ReasonerOutput", "decode_answers", "relation_attention",
           "HopInstructions", "masked_relation_logits", "relation_path_loss", "hop_count_loss", "lexical_match"]


def masked_relation_logits(per_rel: Tensor, eb: Tensor, edge_type: Tensor) -> Tensor:
    """``per_rel`` with the relations a sample's graph does not hold set to ``-inf``, ``(B, T, R)``."""
    present = torch.zeros(per_rel.shape[0], per_rel.shape[2], dtype=torch.bool, device=per_rel.device)
    present[eb, edge_type] = True  # (B, R)
    return per_rel.masked_fill(~present.unsqueeze(1), float("-inf"))


def relation_attention(per_rel: Tensor, eb: Tensor, edge_type: Tensor) -> Tensor:
    """Softmax over the relations each sample's graph holds, read out per directed edge.

    A softmax rather than independent sigmoids makes the hops choose: with sigmoids every weight
    drifts to 1, scores saturate at the clamp and the gradient vanishes.

    Shapes: **per_rel** ``(B, T, R)``; **eb, edge_type** ``(E,)``; **output** ``(E, T)``.
    """
    probs = torch.softmax(masked_relation_logits(per_rel, eb, edge_type), dim=-1).nan_to_num(0.0)  # (B, T, R)
    return probs[eb, :, edge_type]  # (E, T)


def lexical_match(attention: Tensor, qtok: Tensor, rel_feat: Tensor) -> Tensor:
    """Cosine, in the frozen sentence-model space, between the question words each hop reads and
    each relation's name: a relation never seen in training is still found when the question names
    it ("… 's album_content_type"), since neither side passes through trained weights.

    Shapes: **attention** ``(B, T, L)``; **qtok** ``(B, L, D)``; **rel_feat** ``(R, D + 1)``;
    **output** ``(B, T, R)``.
    """
    read = nn.functional.normalize(torch.einsum("btl,bld->btd", attention.float(), qtok.float()), dim=-1)
    names = nn.functional.normalize(rel_feat[:, :-1].float(), dim=-1)  # (R, D)
    return torch.einsum("btd,rd->btr", read, names)


def relation_path_loss(logits: Tensor, gold: Tensor) -> Tensor:
    """Cross-entropy of each hop's relation distribution against the gold relation of that hop
    (``gold`` ``(B, G)`` indexes the relation keys, ``-1`` where unknown); 0 when none is known.

    Shapes: **logits** ``(B, T, R)`` masked (:func:`masked_relation_logits`); **gold** ``(B, G)``.
    """
    hops = min(logits.shape[1], gold.shape[1])
    g = gold[:, :hops]
    known = g >= 0
    if not bool(known.any()):
        return logits.sum() * 0
    picked = logits[:, :hops][known]  # (K, R)
    return nn.functional.cross_entropy(picked.float().clamp(min=-1e4), g[known])


def hop_count_loss(stop: Tensor, gold: Tensor) -> Tensor:
    """Negative log-likelihood of the gold path's length under the hop-count distribution.

    Shapes: **stop** ``(B, T)`` probabilities; **gold** ``(B, G)`` as in :func:`relation_path_loss`.
    """
    length = (gold >= 0).sum(-1)  # (B,)
    known = (length > 0) & (length <= stop.shape[1])
    if not bool(known.any()):
        return stop.sum() * 0
    return nn.functional.nll_loss(stop[known].clamp(1e-6, 1.0).log(), length[known] - 1)


class HopInstructions(nn.Module):
    r"""One instruction vector per hop from the question's token embeddings (NSM-style,
    He et al. 2021, https://arxiv.org/abs/2101.03737).

    .. math::
        \mathbf{q}_t = W_t[\mathbf{q}; \mathbf{i}_{t-1}],\quad
        \alpha_t = \operatorname{softmax}_\ell\big(\mathbf{q}_t^\top K \mathbf{h}_\ell / \sqrt{H}\big),\quad
        \mathbf{i}_t = \textstyle\sum_\ell \alpha_{t\ell} V \mathbf{h}_\ell

    with :math:`\mathbf{h}_\ell` the contextual token embeddings and :math:`\mathbf{q}` the
    pooled question. Each hop reads its own words, so relation order is not lost in one pooled vector.

    Shapes:
        - **qvec:** ``(B, D)``; **qtok:** ``(B, L, D)``; **qmask:** ``(B, L)``
        - **output:** ``(B, T, H)`` instructions and ``(B, T, L)`` token attention
    """

    def __init__(self, text_dim: int, hidden: int, hops: int, dropout: float, context: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(text_dim)
        # a trainable bidirectional GRU over the (frozen) token embeddings: "the child of wife of X's
        # parents" and "X's parents's wife's child" name their hops in opposite word orders, and
        # which word is hop t is a matter of position relative to "of" / "'s"
        self.context = nn.GRU(text_dim, hidden // 2, batch_first=True, bidirectional=True) if context else None
        width = text_dim + (2 * (hidden // 2) if context else 0)
        self.key = nn.Linear(width, hidden)
        self.value = nn.Linear(width, hidden)
        self.question = nn.Sequential(nn.Linear(text_dim, hidden), nn.GELU(), nn.Dropout(dropout))
        self.step = nn.ModuleList(nn.Linear(2 * hidden, hidden) for _ in range(hops))
        self.out = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden))
        self.hidden = hidden

    def forward(self, qvec: Tensor, qtok: Tensor, qmask: Tensor) -> tuple[Tensor, Tensor]:
        tok = self.norm(qtok)  # (B, L, D)
        if self.context is not None:
            lengths = qmask.sum(-1).clamp(min=1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(tok.float(), lengths, batch_first=True, enforce_sorted=False)
            ctx, _ = self.context(packed)
            ctx, _ = nn.utils.rnn.pad_packed_sequence(ctx, batch_first=True, total_length=tok.shape[1])  # (B, L, H')
            tok = torch.cat([tok, ctx.to(tok.dtype)], dim=-1)  # (B, L, D + H')
        keys, values = self.key(tok), self.value(tok)  # (B, L, H)
        q = self.question(qvec)  # (B, H)
        instruction = torch.zeros_like(q)
        out, attn = [], []
        for step in self.step:
            query = step(torch.cat([q, instruction], dim=-1))  # (B, H)
            logits = torch.einsum("bh,blh->bl", query, keys) / self.hidden ** 0.5  # (B, L)
            alpha = torch.softmax(logits.float().masked_fill(~qmask, float("-inf")), dim=-1).to(values.dtype)
            instruction = torch.einsum("bl,blh->bh", alpha, values)  # (B, H)
            out.append(self.out(torch.cat([instruction, q], dim=-1)))
            attn.append(alpha)
        return torch.stack(out, dim=1), torch.stack(attn, dim=1)  # (B, T, H), (B, T, L)


@dataclass
class ReasonerConfig:
    text_dim: int = 384  # the sentence model's dimension (MiniLM-L6: 384)
    segments: int = 0  # possessive segments read beside the question (features.question_features)
    hidden: int = 256  # width of the question/relation matching space
    max_hops: int = 3  # MetaQA and PathQuestion need at most 3
    dropout: float = 0.1
    instructions: bool = True  # per-hop attention over the question's tokens (False: one pooled vector)
    path_weight: float = 1.0  # weight of the gold relation-path loss, where the data gives the path
    context: bool = True  # a trainable BiGRU over the question's tokens before the hop attention
    lexical: bool = True  # add a learned multiple of lexical_match to each hop's relation scores
    # a question-conditioned gate on the flow that comes back to a seed after the first hop
    seed_gate: bool = True
    # how an answering hop gathers the flow into an entity ("add" or "max", RelationFlowConv);
    # training always adds, so that every attended relation gets a gradient, then picks the
    # readout that answers its training questions better (train.choose_readout)
    readout: str = "max"


@dataclass
class ReasonerOutput:
    score: Tensor  # (N,) answer score in [0, 1]
    weights: Tensor  # (E, T) relation attention per directed edge and hop
    hops: list[Tensor]  # T × (N,) entity scores after each hop (hops[0] is after hop 1)
    stop: Tensor  # (B, T) how many hops the question asks for
    logits: Tensor | None = None  # (B, T, R) relation scores per hop, absent relations -inf
    attention: Tensor | None = None  # (B, T, L) which question tokens each hop read


class PathReasoner(nn.Module):
    r"""Relation-path reasoning from the seed entities, one relation attention per hop.

    For question embedding :math:`\mathbf{q}` and relation features :math:`\mathbf{r}`
    (sentence embedding of the predicate's words and a direction bit):

    .. math::
        w^{(t)}_{(u,r,v)} = \operatorname{softmax}_{r' \in \mathcal{R}_G}
            \big(f_t(\mathbf{q})^\top g(\mathbf{r'})\big)_r,\quad
        x^{(0)} = \mathbb{1}_{\text{seeds}},\quad
        x^{(t)} = \operatorname{RelationFlow}(x^{(t-1)}, w^{(t)}),\quad
        s = \sum_{t=1}^{T} \pi_t(\mathbf{q})\, x^{(t)}

    with :math:`\pi = \operatorname{softmax}(h(\mathbf{q}))` the question's hop count.
    Training adds the flow into an entity (TransferNet's clamped sum: every attended relation
    gets a gradient); answering (eval mode) takes the strongest single path (``readout="max"``),
    since a sum saturates at 1 for entities reached through thousands of weakly attended facts.
    On MetaQA held-out questions (guided graphs) this readout took the same model from 0.940 to
    0.971 hits@1 (training with max as well gave 0.960); on PQL-3H, whose graphs are a few facts,
    it cost one question of 103. Training keeps whichever answers its own questions better.
    A path is read back from the largest :math:`x^{(t-1)}_u w^{(t)}_{(u,r,v)}` contributions.

    Args:
        config: :class:`ReasonerConfig` (defaults: 384-d text, 256 hidden, 3 hops, dropout 0.1).

    Shapes:
        - **qvec:** ``(B, (1 + S) D)`` (:func:`~factloom.model.features.question_features`);
          **rel_feat:** ``(R, D + 1)``; graph of ``N`` nodes, ``E`` directed edges
        - **output:** :class:`ReasonerOutput`
    """

    def __init__(self, config: ReasonerConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or ReasonerConfig()
        self.rel = nn.Linear(c.text_dim + 1, c.hidden)
        q_dim = c.text_dim * (1 + c.segments)
        self.query: nn.Module
        if c.instructions:
            self.query = HopInstructions(c.text_dim, c.hidden, c.max_hops, c.dropout, c.context)
        else:
            self.query = nn.Sequential(nn.Linear(q_dim, c.hidden), nn.GELU(), nn.Dropout(c.dropout),
                                       nn.Linear(c.hidden, c.hidden * c.max_hops))
        self.stop = nn.Sequential(nn.Linear(q_dim, c.hidden), nn.GELU(), nn.Linear(c.hidden, c.max_hops))
        self.conv = RelationFlowConv()
        self.readout = RelationFlowConv(aggr=c.readout)
        # scaled dot products keep the relation softmax from saturating early (a one-hot on a wrong
        # relation has no gradient); artefacts from before instructions were trained unscaled
        self._scale = c.hidden ** -0.5 if c.instructions else 1.0
        self.lexical = nn.Parameter(torch.tensor(5.0)) if c.lexical and c.instructions else None
        # MetaQA never answers with, nor passes back through, the question's topic entity ("the
        # films that share actors with X" reach X itself most strongly); PathQuestion sometimes
        # does ("the mother of X's son" is X): the question decides how much flow a seed takes back
        self.seed_gate = nn.Linear(c.text_dim, 1) if c.seed_gate else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.LayerNorm):
                m.reset_parameters()
        if self.seed_gate is not None:
            nn.init.constant_(self.seed_gate.bias, 3.0)  # open (0.95) until the data says otherwise

    def __repr__(self) -> str:
        c = self.config
        return (f"{type(self).__name__}(text_dim={c.text_dim}, hidden={c.hidden}, max_hops={c.max_hops}, "
                f"instructions={c.instructions})")

    def set_readout(self, aggr: str) -> None:
        """Answer with ``aggr`` ("add" or "max") from now on (training is unaffected)."""
        self.readout = RelationFlowConv(aggr=aggr)
        self.config.readout = aggr

    def instructions(self, qvec: Tensor, qtok: Tensor, qmask: Tensor) -> tuple[Tensor, Tensor]:
        """Each hop's instruction ``(B, T, H)`` and token attention ``(B, T, L)``: the part of
        :meth:`forward` that reads the question alone (``c.instructions`` may carry them in)."""
        return self.query(qvec[:, : self.config.text_dim], qtok, qmask)  # type: ignore[no-any-return]

    def forward(self, c: Collated) -> ReasonerOutput:
        cfg = self.config
        b = c.batch
        n_graphs = c.qvec.shape[0]
        rel = self.rel(c.rel_feat)  # (R, H)
        qvec = c.qvec[:, : cfg.text_dim * (1 + cfg.segments)]  # (B, (1 + S) D)
        attention = None
        if cfg.instructions:
            queries, attention = (c.instructions if c.instructions is not None  # (B, T, H), (B, T, L)
                                  else self.instructions(c.qvec, c.qtok, c.qmask))
        else:
            queries = self.query(qvec).view(n_graphs, cfg.max_hops, cfg.hidden)  # (B, T, H)
        per_rel = torch.einsum("bth,rh->btr", queries, rel) * self._scale  # (B, T, R)
        if self.lexical is not None and attention is not None:
            per_rel = per_rel + self.lexical * lexical_match(attention, c.qtok, c.rel_feat)  # (B, T, R)
        eb = edge_batch(c)  # (E,)
        logits = masked_relation_logits(per_rel.float(), eb, b.edge_type)  # (B, T, R)
        probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # (B, T, R)
        weights = probs[eb, :, b.edge_type]  # (E, T)
        seed = b.seed.float()  # (N,)
        # how much of the flow that returns to a seed it keeps, per question (1: no gate)
        keep_seed = torch.sigmoid(self.seed_gate(c.qvec[:, : cfg.text_dim]).float()).squeeze(-1)[b.batch] \
            if self.seed_gate is not None else None  # (N,)
        x = seed
        hops = []
        conv = self.conv if self.training else self.readout
        for t in range(cfg.max_hops):
            x = conv(x, b.edge_index, weights[:, t])
            if keep_seed is not None:
                x = x * (1 - seed * (1 - keep_seed))
            hops.append(x)
        stop = torch.softmax(self.stop(qvec).float(), dim=-1)  # (B, T)
        per_node = stop[b.batch]  # (N, T)
        # each hop's scores relative to that hop's best entity, so that a longer chain (a product
        # of more attentions) is not penalised for its length; the hop count is the stop head's job
        stacked = torch.stack(hops, dim=-1)  # (N, T)
        best = scatter(stacked, b.batch, dim=0, dim_size=n_graphs, reduce="max").clamp(min=1e-6)  # (B, T)
        score = (stacked / best[b.batch] * per_node).sum(-1)  # (N,)
        return ReasonerOutput(score=score, weights=weights, hops=hops, stop=stop, logits=logits, attention=attention)

    def loss(self, c: Collated, out: ReasonerOutput) -> Tensor:
        """Balanced binary cross-entropy: answers against the other entities. A seed may be the
        answer ("the mother of X's son" is X)."""
        b = c.batch
        score = out.score.clamp(1e-6, 1 - 1e-6)
        target = b.answer
        pos = target > 0
        neg = target == 0
        bce = nn.functional.binary_cross_entropy(score, target, reduction="none")
        loss = bce[pos].mean() if pos.any() else score.sum() * 0
        loss = loss + (bce[neg].mean() if neg.any() else 0)
        if out.logits is not None and c.gold.numel() and self.config.path_weight:
            # where the data names the relation of each hop, teach the hops directly, and the hop count
            loss = loss + self.config.path_weight * relation_path_loss(out.logits, c.gold)
            loss = loss + hop_count_loss(out.stop, c.gold)
        return loss

    def hparams(self) -> dict[str, object]:
        return asdict(self.config)


def decode_answers(c: Collated, out: ReasonerOutput, *, top_k: int, paths_per_answer: int = 3) -> list[list[Answer]]:
    """The ``top_k`` entities of each sample with their best supporting paths (a seed is an
    answer only when a path of at least one hop leads back to it)."""
    score = out.score.detach().float().cpu()
    # plain lists: the backtracking reads single elements, which cost ~1 µs each from a tensor
    weights = out.weights.detach().float().cpu().tolist()
    hops = [h.detach().float().cpu() for h in out.hops]
    stop = out.stop.detach().float().cpu()
    src, dst = c.batch.edge_index.cpu().tolist()
    results: list[list[Answer]] = []
    for i, s in enumerate(c.samples):
        n0, n1 = c.node_offset[i], c.node_offset[i + 1]
        e0, e1 = c.edge_offset[i], c.edge_offset[i + 1]
        local = score[n0:n1].clone()
        order = torch.argsort(local, descending=True, stable=True)[:top_k].tolist()
        walk = _Walk(src, dst, range(e0, e1), weights, [h[n0:n1].tolist() for h in hops], n0, set(s.seeds))
        answers = []
        for v in order:
            if local[v] <= 0:
                break
            # the hop count that contributes most to this entity's score
            t_best = max(range(len(hops)),
                         key=lambda t: float(stop[i, t] * hops[t][n0 + v] / max(1e-6, float(hops[t][n0:n1].max()))))
            paths = walk.paths(v, t_best, paths_per_answer, distinct=True)
            if not paths and paths_per_answer:
                # the flow walks, it does not keep to simple paths: "the tracks of the tracks of
                # Believe" goes round the self-loop "Believe tracks Believe" twice
                paths = walk.paths(v, t_best, paths_per_answer, distinct=False)
            steps = []
            for path in paths:
                steps.append([_step(s, (e - e0) // 2) for e in path])
            answers.append(Answer(entity_id=s.nodes[v], name=s.names.get(s.nodes[v], s.nodes[v]),
                                  score=round(float(local[v]), 6), paths=steps))
        results.append(answers)
    return results


def _step(s: object, fact: int) -> PathStep:
    e = s.edges[fact]  # type: ignore[attr-defined]
    names = s.names  # type: ignore[attr-defined]
    return PathStep(e.fact_id, names.get(e.source_id, e.source_id), e.predicate,
                    names.get(e.target_id, e.target_id), e.sources)


class _Walk:
    """Backtracking over one sample's flow: edge paths from a seed, strongest first.

    ``paths`` of an entity at a hop do not depend on who asks, so they are kept: without that the
    search re-explores a hub's thousands of in-edges for every path through it (a 3-hop batch with
    "Drama" in its graphs took seconds per question).
    """

    def __init__(self, src: list[int], dst: list[int], edges: range, weights: list[list[float]],
                 hops: list[list[float]], n0: int, seeds: set[int]) -> None:
        self.src, self.weights, self.hops, self.n0, self.seeds = src, weights, hops, n0, seeds
        self.incoming: dict[int, list[int]] = {}  # local node → the sample's global directed edge ids
        for e in edges:
            self.incoming.setdefault(dst[e] - n0, []).append(e)
        self._memo: dict[tuple[int, int, int, bool], list[list[int]]] = {}

    def paths(self, v: int, t: int, limit: int, *, distinct: bool) -> list[list[int]]:
        """Up to ``limit`` edge paths of ``t + 1`` hops from a seed to ``v``; with ``distinct``
        each fact at most once."""
        if limit <= 0:
            return []
        key = (v, t, limit, distinct)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._search(v, t, limit, distinct)
        return hit

    def _search(self, v: int, t: int, limit: int, distinct: bool) -> list[list[int]]:
        incoming, src, weights, n0 = self.incoming.get(v, []), self.src, self.weights, self.n0
        if t == 0:
            first = [(weights[e][0], e) for e in incoming if src[e] - n0 in self.seeds]
            return [[e] for _, e in sorted(first, reverse=True)[:limit]]
        before = self.hops[t - 1]
        cands: list[tuple[float, int, int]] = []
        for e in incoming:
            u = src[e] - n0
            contribution = before[u] * weights[e][t]
            if contribution > 1e-4:
                cands.append((contribution, e, u))
        out: list[list[int]] = []
        for _, e, u in sorted(cands, reverse=True):
            for prefix in self.paths(u, t - 1, limit - len(out), distinct=distinct):
                # a path uses each fact once (unless not distinct); it may end where it started (the answer is the seed)
                if not distinct or e // 2 not in {x // 2 for x in prefix}:
                    out.append(prefix + [e])
            if len(out) >= limit:
                break
        return out[:limit]
