r"""Elastic Weight Consolidation: learn new facts without overwriting what the old ones taught.

A model trained on snapshot :math:`A` and then on snapshot :math:`B` alone drifts away from the
parameters :math:`A` needed (catastrophic forgetting). EWC (Kirkpatrick et al. 2017,
https://arxiv.org/abs/1612.00796) keeps every parameter near its value after :math:`A`, the anchor
:math:`\theta^*`, in proportion to how much :math:`A`'s likelihood depends on it — the diagonal of
the Fisher information :math:`F`, estimated from squared gradients. Online EWC (Schwarz et al. 2018,
https://arxiv.org/abs/1805.06370) keeps one running penalty across many snapshots instead of one per
snapshot: the Fisher is decayed and summed, and the anchor moves to the latest parameters.

For embedding models the tables grow as snapshots bring new entities; a grown parameter is
penalised on the rows its anchor has (the old ones) only, and new rows are free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["ElasticWeights", "empirical_fisher", "grow_embedding"]


def empirical_fisher(model: torch.nn.Module, batches: Iterable[Any], loss_fn: Callable[[Any], Tensor], *,
                     reduce: Callable[[Sequence[Tensor]], None] | None = None) -> dict[str, Tensor]:
    r"""Diagonal empirical Fisher of ``loss_fn`` over ``batches``, per parameter name.

    .. math::
        F_i = \frac{1}{Z} \cdot \frac{1}{|\mathcal{B}|} \sum_{b \in \mathcal{B}}
              \Big(\frac{\partial \ell(b)}{\partial \theta_i}\Big)^2,
        \qquad Z = \max_i \frac{1}{|\mathcal{B}|} \sum_{b} \Big(\frac{\partial \ell(b)}{\partial \theta_i}\Big)^2

    The gradient is the batch's (its mean loss), not one per example: one backward pass per batch,
    at the price of an estimate that shrinks with the batch size. Dividing by the largest entry over
    *all* parameters (not per parameter, so the tables keep their relative weight) makes the
    largest entry 1 and the penalty strength :math:`\lambda` independent of the loss's scale and the
    batch size; all zeros stay zeros.

    Data-parallel (:mod:`factloom.model.distributed`): each rank passes its share of the batches and
    ``reduce`` sums the squared-gradient sums and the batch count over the ranks in place before the
    normalisation, so every rank holds the same Fisher, the one a single process computes on all the
    batches (summing is averaging here: the mean's :math:`1/|\mathcal{B}|` cancels). The ranks must
    hold the same parameters (DDP replicas do).

    Args:
        model: its ``named_parameters()`` that require a gradient are measured; ``.grad`` is untouched.
        batches: what ``loss_fn`` takes, one item per backward pass (at least one over all ranks).
        loss_fn: the scalar loss of one batch under ``model``.
        reduce: sums tensors over the ranks in place
            (:func:`~factloom.model.distributed.all_reduce_sum_`); ``None`` for one process.

    Shapes:
        - **output:** one tensor per parameter name, each of that parameter's shape
    """
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    sums = {name: torch.zeros_like(p, memory_format=torch.contiguous_format) for name, p in params.items()}
    count = 0
    for batch in batches:
        grads = torch.autograd.grad(loss_fn(batch), list(params.values()), allow_unused=True)
        for name, grad in zip(params, grads, strict=True):
            if grad is not None:
                sums[name] += grad.detach() ** 2
        count += 1
    if reduce is not None:
        counted = next(iter(sums.values())).new_tensor([float(count)]) if sums else torch.tensor([float(count)])
        reduce([*sums.values(), counted])
        count = int(counted.item())
    if not count:
        raise ValueError("empirical_fisher needs at least one batch")
    top = max((float(s.max()) for s in sums.values() if s.numel()), default=0.0)
    scale = 1.0 / top if top > 0 else 0.0  # the 1/|B| of the mean cancels in the normalisation
    return {name: s * scale for name, s in sums.items()}


def _pad_rows(t: Tensor, shape: torch.Size) -> Tensor:
    """``t`` zero-padded along dim 0 to ``shape`` (equal trailing dims)."""
    if t.shape == shape:
        return t
    if t.dim() == 0 or t.shape[1:] != shape[1:] or t.shape[0] > shape[0]:
        raise ValueError(f"cannot pad {tuple(t.shape)} to {tuple(shape)}: only extra leading rows can be added")
    out = t.new_zeros(shape)
    out[: t.shape[0]] = t
    return out


class ElasticWeights:
    r"""The (online) EWC penalty: an anchor :math:`\theta^*` and a diagonal Fisher :math:`F` per
    parameter name, from Kirkpatrick et al. 2017 (https://arxiv.org/abs/1612.00796) and, across
    many snapshots, Schwarz et al. 2018 (https://arxiv.org/abs/1805.06370).

    .. math::
        \Omega(\theta) = \frac{\lambda}{2} \sum_i F_i \, (\theta_i - \theta^*_i)^2

    summed over the parameters the Fisher names and, for a parameter that has grown since the anchor
    was taken (an embedding table with new rows), over the anchor's leading rows only: the new rows
    have no Fisher and learn freely. :meth:`consolidate` folds a new snapshot in,

    .. math::
        F \leftarrow \gamma \, F_{\text{parent}} + F_{\text{new}}, \qquad \theta^* \leftarrow \theta

    with the parent's Fisher zero-padded to the grown shape. The sum is not renormalised: with
    normalised Fishers (:func:`empirical_fisher`) its largest entry is at most :math:`1 + \gamma + \dots`,
    and the weights of old snapshots stay in proportion. Rows are matched by position: a model whose
    growth *moves* old rows (the scorer's reciprocal relations) maps the anchor and the Fisher onto
    its new layout before using them (:meth:`ComplExScorer.align`).

    Args:
        anchor: parameter name → the values to stay near (detached; not copied).
        fisher: parameter name → the diagonal Fisher, the anchor's shape.
        lam: :math:`\lambda`, the penalty's strength (default ``10.0``; with a Fisher whose largest
            entry is 1, the most important weight is held like a spring of stiffness ``lam``).

    Shapes:
        - **anchor[name], fisher[name]:** ``(N_old, *)``; the model's parameter: ``(N, *)``, ``N >= N_old``
        - **penalty:** ``()``
    """

    def __init__(self, anchor: dict[str, Tensor], fisher: dict[str, Tensor], lam: float = 10.0) -> None:
        if set(anchor) != set(fisher):
            raise ValueError(f"anchor and fisher name different parameters: {sorted(set(anchor) ^ set(fisher))}")
        for name, a in anchor.items():
            if a.shape != fisher[name].shape:
                raise ValueError(f"{name}: anchor {tuple(a.shape)} and fisher {tuple(fisher[name].shape)} differ")
        self.anchor = {name: a.detach() for name, a in anchor.items()}
        self.fisher = {name: f.detach() for name, f in fisher.items()}
        self.lam = float(lam)

    @classmethod
    def from_model(cls, model: torch.nn.Module, fisher: dict[str, Tensor], lam: float = 10.0) -> ElasticWeights:
        """Anchor at ``model``'s current parameters (detached clones) for the names ``fisher`` has."""
        params = dict(model.named_parameters())
        missing = sorted(set(fisher) - set(params))
        if missing:
            raise KeyError(f"the model has no parameter {missing}")
        return cls({name: params[name].detach().clone() for name in fisher}, fisher, lam)

    def penalty(self, model: torch.nn.Module) -> Tensor:
        """:math:`\\Omega(\\theta)` of ``model``'s parameters, differentiable; rows past the anchor's are free."""
        params = dict(model.named_parameters())
        total = torch.zeros((), device=next(iter(params.values())).device) if params else torch.zeros(())
        for name, anchor in self.anchor.items():
            p = params[name]
            old = p[: anchor.shape[0]] if p.dim() else p  # (N_old, *)
            if old.shape != anchor.shape:
                raise ValueError(f"{name}: parameter {tuple(p.shape)} cannot hold anchor {tuple(anchor.shape)}")
            fisher = self.fisher[name].to(p.device)
            total = total + (fisher * (old - anchor.to(p.device)) ** 2).sum()
        return 0.5 * self.lam * total

    def add_gradient_(self, model: torch.nn.Module) -> None:
        """Add :math:`\partial\Omega/\partial\theta = \lambda F \odot (\theta - \theta^*)` to each
        anchored parameter's ``.grad`` in place (rows past the anchor's get nothing): the penalty's
        gradient without building :meth:`penalty`'s graph, for a training step that needs no
        :math:`\Omega` value — a few passes over each table instead of a forward and a backward."""
        params = dict(model.named_parameters())
        for name, anchor in self.anchor.items():
            p = params[name]
            rows = anchor.shape[0] if p.dim() else None
            if (p[:rows] if rows is not None else p).shape != anchor.shape:
                raise ValueError(f"{name}: parameter {tuple(p.shape)} cannot hold anchor {tuple(anchor.shape)}")
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grad = p.grad[:rows] if rows is not None else p.grad
            diff = p.detach()[:rows] if rows is not None else p.detach()
            grad.addcmul_(diff - anchor.to(p.device), self.fisher[name].to(p.device), value=self.lam)

    def consolidate(self, model: torch.nn.Module, fisher_new: dict[str, Tensor], gamma: float = 1.0) -> ElasticWeights:
        """Online EWC: ``F ← γ·F_parent + F_new`` (parent zero-padded to the grown shape), anchor at
        ``model``'s current parameters; a new object, ``self`` unchanged."""
        fisher = dict(fisher_new)
        for name, parent in self.fisher.items():
            new = fisher_new.get(name)
            fisher[name] = gamma * parent if new is None else gamma * _pad_rows(parent, new.shape) + new
        return type(self).from_model(model, fisher, self.lam)

    def save(self, path: Path) -> None:
        torch.save({"anchor": self.anchor, "fisher": self.fisher, "lam": self.lam}, path)

    @classmethod
    def load(cls, path: Path) -> ElasticWeights:
        state = torch.load(path, weights_only=True)
        return cls(state["anchor"], state["fisher"], state["lam"])

    def __repr__(self) -> str:
        shapes = ", ".join(f"{name}={tuple(a.shape)}" for name, a in self.anchor.items())
        top = max((float(f.max()) for f in self.fisher.values() if f.numel()), default=0.0)
        return f"{type(self).__name__}({shapes}, lam={self.lam}, fisher_max={top:.3g})"


def grow_embedding(embedding: torch.nn.Embedding, rows: int, init: float = 1e-3) -> torch.nn.Embedding:
    r"""A new :class:`~torch.nn.Embedding` with ``rows`` more rows: the old rows copied bit-identically,
    the new ones :math:`\mathcal{N}(0, 1) \cdot` ``init`` (the scale the scorer's tables start at, so a
    new entity starts near the origin and does not disturb scores of the old ones).

    Args:
        embedding: the table to grow; left unchanged.
        rows: how many rows to add (``>= 0``).
        init: the new rows' standard deviation (default ``1e-3``).

    Shapes:
        - **embedding.weight:** ``(N, D)``; **output.weight:** ``(N + rows, D)``
    """
    if rows < 0:
        raise ValueError(f"rows must be >= 0, not {rows}")
    old = embedding.weight
    grown = torch.nn.Embedding(old.shape[0] + rows, old.shape[1], padding_idx=embedding.padding_idx,
                               max_norm=embedding.max_norm, norm_type=embedding.norm_type,
                               scale_grad_by_freq=embedding.scale_grad_by_freq, sparse=embedding.sparse,
                               device=old.device, dtype=old.dtype)
    with torch.no_grad():
        grown.weight[: old.shape[0]] = old
        grown.weight[old.shape[0] :].normal_().mul_(init)
    grown.weight.requires_grad_(old.requires_grad)
    return grown
