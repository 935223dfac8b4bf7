"""The learned router: question-conditioned relevance of every edge of the candidate subgraph, and
the small connected subgraph, within a budget, that the reasoner reads."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor, nn

from factloom.graph.types import Subgraph
from factloom.model.features import Collated, RelationKey, edge_batch
from factloom.model.flow import RelationFlowConv
from factloom.model.reasoner import (
    HopInstructions,
    hop_count_loss,
    lexical_match,
    masked_relation_logits,
    relation_path_loss,
)

__all__ = ["RouterConfig", "RelationRouter", "RouterOutput", "RelationPlan", "GuessOutcomes", "select_subgraphs",
           "relation_entropy"]


def relation_entropy(logits: Tensor) -> Tensor:
    r"""Entropy in nats of each hop's relation distribution,
    :math:`H = -\sum_r a_r \ln a_r` with :math:`a = \operatorname{softmax}(\text{logits})`: 0 where
    one relation takes all the attention, :math:`\ln k` where ``k`` share it evenly. A relation
    absent from the sample's graph is ``-inf`` and counts as :math:`0 \ln 0 = 0`; a hop with no
    relation at all is 0 too.

    Shapes: **logits** ``(..., R)``; **output** ``(...)``.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)  # (..., R), -inf where absent, nan where all are
    p = logp.exp().nan_to_num(0.0)
    return -(p * logp.nan_to_num(0.0, neginf=0.0)).sum(-1) + 0.0  # + 0.0: no -0.0


@dataclass
class RouterConfig:
    text_dim: int = 384  # the sentence model's dimension
    segments: int = 0  # possessive segments read beside the question (0: off)
    hidden: int = 128  # matching space; the router only needs "is this relation asked for"
    max_hops: int = 3
    dropout: float = 0.1
    threshold: float = 0.02  # an edge is kept when some hop gives its relation this much attention
    budget: int = 500  # at most this many facts handed to the reasoner
    instructions: bool = True  # per-hop attention over the question's tokens (False: one pooled vector)
    path_weight: float = 1.0  # weight of the gold relation-path loss, where the data gives the path
    context: bool = True  # a trainable BiGRU over the question's tokens before the hop attention
    lexical: bool = True  # add a learned multiple of reasoner.lexical_match to each hop's relation scores
    # the relations of each hop's top ``top_k`` kept whatever their attention (0: threshold only): a
    # trained softmax saturates, its runner-up at ~1e-6 where no threshold reaches it
    top_k: int = 2


@dataclass
class RouterOutput:
    edge: Tensor  # (E,) relevance of each directed edge, in [0, 1]
    node: Tensor  # (N,) relevance of each node: how strongly the seeds reach it
    logits: Tensor | None = None  # (B, T, R) relation scores per hop, absent relations -inf
    stop: Tensor | None = None  # (B, T) how many hops the question asks for


class GuessOutcomes:
    """How often one kb's confident last-hop guesses (:meth:`RelationPlan.guess`) missed, over
    roughly the last ``window`` guesses. A router trained to choose among the relations present
    can be sure of one a frontier lacks: PathQuestion's PQL kbs hold near-synonyms
    (``music.album.releases``, ``music.recording.releases``) and most of their guesses missed,
    each miss costing the store round trip the guess meant to save. Where more than ``limit`` of
    them miss, the kb asks instead, guessing once every ``probe_every`` confident questions to
    notice when guessing pays again."""

    def __init__(self, limit: float = 0.1, window: int = 64, probe_every: int = 16) -> None:
        self.limit, self.window, self.probe_every = limit, window, probe_every
        self.tried = self.missed = 0
        self._withheld = 0
        self._lock = threading.Lock()  # the API's batch workers share a kb's outcomes

    def try_guess(self) -> bool:
        """Whether to guess now; if so, the guess counts as tried."""
        with self._lock:
            if self.tried >= self.window // 4 and self.missed > self.limit * self.tried:
                self._withheld += 1
                if self._withheld % self.probe_every:
                    return False
            self.tried += 1
            if self.tried > self.window:  # forget the older half
                self.tried //= 2
                self.missed //= 2
            return True

    def miss(self) -> None:
        with self._lock:
            self.missed += 1


# at a hop before a question's last, a relation that reads more than this many facts around the
# question's frontier is followed only where it is the hop's strongest and no cheaper relation
# holds half its attention: an uncertain relation into a hub ("has_genre" back from "Drama", 4,005
# facts) made MetaQA 3-hop graphs of 2,000-5,000 facts where the question's own path read a few
# dozen (docs/reasoning.md)
SIDE_FACTS = 100


@dataclass
class RelationPlan:
    """A batch of questions read by the router before retrieval: each hop's relation scores over a
    vocabulary of relation keys, and how many hops each question asks for.

    :meth:`choose` picks, among the relations the store says the hop's frontier actually has, the
    strongest under a softmax over those alone (the training-time softmax is also over the
    relations present) until they hold ``mass`` of it, at most ``keep``, plus the next hop's
    strongest. A relation outside the vocabulary (a predicate newer than it) is always followed.
    A confident hop follows one relation: always taking the runner-up as well (a trained softmax
    puts it at ~1e-6) brought in a hub's relation ("has_genre") beside most MetaQA hops.
    Before a question's last hop, a relation for which the store counts more than ``side_facts``
    facts around the frontier is followed only where it is the hop's strongest and no cheaper
    relation picked holds half its attention.
    :meth:`guess` answers for a last hop before the store is asked. A plan serves one retrieval:
    it remembers its guesses, to count those that missed in the kb's ``outcomes``.
    """

    keys: list[RelationKey]
    logits: Tensor  # (B, T, R)
    depth: list[int]  # per question, the hops worth expanding
    keep: int
    mass: float
    outcomes: GuessOutcomes = field(default_factory=GuessOutcomes)  # the kb's, kept across plans
    side_facts: int = SIDE_FACTS

    def __post_init__(self) -> None:
        self._index = {k: r for r, k in enumerate(self.keys)}
        self._guessed: set[tuple[int, int]] = set()

    def choose(self, question: int, hop: int,
               present: Mapping[RelationKey, int] | Sequence[RelationKey]) -> list[RelationKey]:
        """The relations to follow at ``hop`` among those ``present`` around the question's frontier
        (with the facts each would read there, where the store counted them)."""
        if (question, hop) in self._guessed:  # asked after all: the guess reached nothing
            self._guessed.discard((question, hop))
            self.outcomes.miss()
        if hop >= self.depth[question]:
            return []
        known = [k for k in present if k in self._index]
        chosen = [k for k in present if k not in self._index]
        if known:
            rows = self.logits[question, :, [self._index[k] for k in known]]  # (T, K)
            probs = torch.softmax(rows[hop], dim=-1)
            ranked = probs.argsort(descending=True).tolist()[: self.keep]
            mass = probs[ranked].cumsum(0)
            # the strongest relations until they hold ``mass`` of the hop's attention
            enough = int((mass < self.mass).sum()) + 1
            picked = ranked[:enough]
            if hop + 1 < self.depth[question]:
                # and the next hop's strongest: a walk round a self-loop ("the track of release of
                # Believe's recording", where Believe is its own recording) shifts the hops by one
                picked.append(int(rows[hop + 1].argmax()))
                if isinstance(present, Mapping):
                    picked = self._leave_hubs(picked, probs, [present[k] for k in known])
            chosen += [known[r] for r in dict.fromkeys(picked)]
        return chosen

    def _leave_hubs(self, picked: list[int], probs: Tensor, facts: list[int]) -> list[int]:
        # before the last hop: a relation other than the strongest that would read more than
        # ``side_facts`` is left, and so is the strongest where a cheap relation holds at least half
        # its attention ("has_genre" 0.31, "directed_by" 0.26: back from "Drama" to 4,437 films)
        cheap = [r for r in picked if facts[r] <= self.side_facts]
        strongest = picked[0]
        rival = any(float(probs[r]) >= float(probs[strongest]) / 2 for r in cheap if r != strongest)
        return [r for r in picked if r in cheap or (r == strongest and not rival)]

    def guess(self, question: int, hop: int) -> list[RelationKey] | None:
        """The hop's one relation when it alone holds ``mass`` of the hop's attention over the whole
        vocabulary, else ``None``: how retrieval follows a question's last hop without asking the
        store which relations are around the frontier
        (:func:`~factloom.graph.retrieval.guided_subgraphs`). Where the router is that sure,
        :meth:`choose` picks the same relation among those present. ``None`` also where this kb's
        recent guesses mostly missed (:class:`GuessOutcomes`); retrieval asks :meth:`choose` for a
        question whose guess reached nothing, which counts the miss.
        """
        if hop >= self.depth[question] or not self.keys:
            return None
        probs = torch.softmax(self.logits[question, hop], dim=-1)
        best = int(probs.argmax())
        if float(probs[best]) < self.mass or not self.outcomes.try_guess():
            return None
        self._guessed.add((question, hop))
        return [self.keys[best]]


class RelationRouter(nn.Module):
    r"""Edge and node relevance for a question, by question-conditioned relation flow from the seeds.

    .. math::
        a^{(t)} = \operatorname{softmax}_{r \in \mathcal{R}_G}\big(f_t(\mathbf{q})^\top g(\mathbf{r})\big),\quad
        x^{(t)} = \operatorname{RelationFlow}(x^{(t-1)}, a^{(t)}),\quad
        w_{(u,r,v)} = \max_t \Big(\textstyle\sum_{k \ge t} \pi_k\Big) a^{(t)}_r,\quad
        n_v = \sum_{t \le T} \pi_t x^{(t)}_v

    with :math:`f_t` the hop's instruction (:class:`~factloom.model.reasoner.HopInstructions`, the
    question's tokens read once per hop) and :math:`\pi` the question's hop count. Trained so that
    answers are reached after the asked hops (and, where the data names it, on the gold relation of
    each hop), it learns which relations the question is about; the edge relevance forgets the hop
    (the reasoner orders them). Artefacts with ``instructions=False`` read one pooled question
    vector, use :math:`w = \max_t a^{(t)}` and :math:`n_v = \max_t x^{(t)}_v`.
    :func:`select_subgraphs` then keeps, hop by hop from the seeds, the edges with
    :math:`w \ge` ``threshold``, so the kept subgraph is connected to the seeds by construction.

    Args:
        config: :class:`RouterConfig` (384-d text, 128 hidden, 3 hops, threshold 0.5, budget 500).

    Shapes:
        - **qvec:** ``(B, (1 + S) D)``; **rel_feat:** ``(R, D + 1)``
        - **output:** :class:`RouterOutput` with ``edge (E,)`` and ``node (N,)``
    """

    def __init__(self, config: RouterConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or RouterConfig()
        self.rel = nn.Linear(c.text_dim + 1, c.hidden)
        self.query: nn.Module
        if c.instructions:
            self.query = HopInstructions(c.text_dim, c.hidden, c.max_hops, c.dropout, c.context)
        else:
            self.query = nn.Sequential(nn.Linear(c.text_dim * (1 + c.segments), c.hidden), nn.GELU(),
                                       nn.Dropout(c.dropout), nn.Linear(c.hidden, c.hidden * c.max_hops))
        if c.instructions:
            # the hop count, so that the training signal is "the answer after the asked hops" and the
            # entities a 3-hop question passes through on its way are not negatives
            self.stop = nn.Sequential(nn.Linear(c.text_dim, c.hidden), nn.GELU(), nn.Linear(c.hidden, c.max_hops))
        self.conv = RelationFlowConv()
        # scaled dot products keep the relation softmax from saturating early (a one-hot on a wrong
        # relation has no gradient); artefacts from before instructions were trained unscaled
        self._scale = c.hidden ** -0.5 if c.instructions else 1.0
        self.lexical = nn.Parameter(torch.tensor(5.0)) if c.lexical and c.instructions else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.LayerNorm):
                m.reset_parameters()

    def __repr__(self) -> str:
        c = self.config
        return (f"{type(self).__name__}(hidden={c.hidden}, max_hops={c.max_hops}, "
                f"threshold={c.threshold}, budget={c.budget})")

    def relation_scores(self, qvec: Tensor, qtok: Tensor, qmask: Tensor,
                        rel_feat: Tensor) -> tuple[Tensor, Tensor | None]:
        """Each hop's score of each relation ``(B, T, R)`` (no graph needed) and the hop-count
        distribution ``(B, T)`` (``None`` for artefacts without per-hop instructions)."""
        cfg = self.config
        rel = self.rel(rel_feat)  # (R, H)
        if cfg.instructions:
            query, attention = self.query(qvec[:, : cfg.text_dim], qtok, qmask)  # (B, T, H), (B, T, L)
        else:
            query = self.query(qvec[:, : cfg.text_dim * (1 + cfg.segments)]).view(-1, cfg.max_hops, cfg.hidden)
        per_rel = torch.einsum("bth,rh->btr", query, rel) * self._scale  # (B, T, R)
        if self.lexical is not None:
            per_rel = per_rel + self.lexical * lexical_match(attention, qtok, rel_feat)  # (B, T, R)
        hops = torch.softmax(self.stop(qvec[:, : cfg.text_dim]).float(), dim=-1) if cfg.instructions else None
        return per_rel.float(), hops

    @property
    def can_plan(self) -> bool:
        """Whether :meth:`plan` can say how many hops a question asks for (per-hop instructions)."""
        return self.config.instructions

    def plan(self, qvec: Tensor, qtok: Tensor, qmask: Tensor, rel_feat: Tensor, keys: Sequence[RelationKey],
             *, keep: int, mass: float, max_hops: int, min_hop_mass: float) -> RelationPlan:
        """Before any retrieval: each hop's relation scores over the kb's relation vocabulary
        ``keys`` (``rel_feat`` their features) and how many hops each question asks for with
        probability ``min_hop_mass`` or more (at most ``max_hops``); see :class:`RelationPlan`.

        Shapes: **qvec** ``(B, D)``; **qtok** ``(B, L, D)``; **qmask** ``(B, L)``; **rel_feat** ``(R, D + 1)``.
        """
        if not self.can_plan:
            raise ValueError("this router was trained without per-hop instructions and cannot plan")
        per_rel, hops = self.relation_scores(qvec, qtok, qmask, rel_feat)
        assert hops is not None
        needed = hops.flip(-1).cumsum(-1).flip(-1)  # (B, T): P(the question asks for t + 1 hops or more)
        depth = [max(1, min(max_hops, int((needed[i] >= min_hop_mass).sum()))) for i in range(needed.shape[0])]
        return RelationPlan(list(keys), per_rel.detach().float().cpu(), depth, keep, mass)

    def forward(self, c: Collated) -> RouterOutput:
        b = c.batch
        cfg = self.config
        per_rel, hops = self.relation_scores(c.qvec, c.qtok, c.qmask, c.rel_feat)  # (B, T, R), (B, T)
        eb = edge_batch(c)
        logits = masked_relation_logits(per_rel, eb, b.edge_type)  # (B, T, R)
        hop_weight = torch.softmax(logits, dim=-1).nan_to_num(0.0)[eb, :, b.edge_type]  # (E, T)
        x = b.seed.float()
        reach = torch.zeros_like(x)
        stop = hops[b.batch] if hops is not None else None  # (N, T)
        for t in range(cfg.max_hops):
            x = self.conv(x, b.edge_index, hop_weight[:, t])
            reach = reach + stop[:, t] * x if stop is not None else torch.maximum(reach, x)
        if stop is not None:
            # hop t counts as much as the question asks for t hops or more
            needed = stop.flip(-1).cumsum(-1).flip(-1)[b.edge_index[0]]  # (E, T)
            hop_weight = hop_weight * needed
            if cfg.top_k:
                top = logits.topk(min(cfg.top_k, logits.shape[-1]), dim=-1).indices  # (B, T, k)
                # a relation the sample's graph lacks is -inf and never kept
                ranked = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, top, True) & logits.isfinite()
                hop_weight = torch.maximum(hop_weight, ranked[eb, :, b.edge_type].float() * needed)  # (E, T)
        return RouterOutput(edge=hop_weight.max(dim=-1).values, node=reach, logits=logits, stop=hops)

    def loss(self, c: Collated, out: RouterOutput) -> Tensor:
        b = c.batch
        node = out.node.clamp(1e-6, 1 - 1e-6)
        keep = b.seed == 0
        pos, neg = (b.answer > 0) & keep, (b.answer == 0) & keep
        bce = nn.functional.binary_cross_entropy(node, b.answer, reduction="none")
        loss = bce[pos].mean() if pos.any() else node.sum() * 0
        loss = loss + (bce[neg].mean() if neg.any() else 0)
        if out.logits is not None and c.gold.numel() and self.config.path_weight:
            loss = loss + self.config.path_weight * relation_path_loss(out.logits, c.gold)
            if out.stop is not None:
                loss = loss + hop_count_loss(out.stop, c.gold)
        return loss

    def hparams(self) -> dict[str, object]:
        return asdict(self.config)


def select_subgraphs(c: Collated, out: RouterOutput, *, threshold: float, budget: int,
                     max_hops: int) -> list[Subgraph]:
    """Per sample, the facts kept hop by hop from the seeds: relevance ≥ ``threshold``, strongest
    first, at most ``budget``; ``truncated`` says the budget cut some relevant edge."""
    weight = out.edge.detach().float().cpu()
    ei = c.batch.edge_index.cpu()
    graphs: list[Subgraph] = []
    for i, s in enumerate(c.samples):
        n0, e0, e1 = c.node_offset[i], c.edge_offset[i], c.edge_offset[i + 1]
        by_source: dict[int, list[int]] = {}
        for e in range(e0, e1):
            if float(weight[e]) >= threshold:
                by_source.setdefault(int(ei[0, e]) - n0, []).append(e)
        kept: dict[int, None] = {}
        reached = set(s.seeds)
        frontier = set(s.seeds)
        truncated = False
        for _ in range(max_hops):
            cands = sorted((e for u in frontier for e in by_source.get(u, [])), key=lambda e: -float(weight[e]))
            nxt: set[int] = set()
            for e in cands:
                fact = (e - e0) // 2
                if fact in kept:
                    continue
                if len(kept) >= budget:
                    truncated = True
                    break
                kept[fact] = None
                v = int(ei[1, e]) - n0
                if v not in reached:
                    nxt.add(v)
            reached |= nxt
            frontier = nxt
            if not frontier or truncated:
                break
        seeds_by_id = {s.nodes[j] for j in s.seeds}
        edges = [s.edges[f] for f in kept]
        graphs.append(Subgraph(
            seeds=[], names=s.names, edges=edges, truncated=truncated,
        ))
        graphs[-1].seeds = [x for x in _seeds_of(s, seeds_by_id)]
    return graphs


def _seeds_of(s: object, ids: set[str]) -> list:  # type: ignore[type-arg]
    from factloom.graph.types import Seed

    names = s.names  # type: ignore[attr-defined]
    return [Seed(entity_id=i, name=names.get(i, i), score=1.0, how="exact") for i in sorted(ids)]
