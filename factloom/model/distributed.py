r"""Data-parallel training across processes with PyTorch's DistributedDataParallel (DDP), for any
module whose training step is a loss over a batch of rows.

Every rank (process) of the default process group holds a whole replica of the model and the whole
training set, and draws the same global batches (the same seed); what is split is the *work* of each
step. Rank :math:`r` of :math:`W` takes rows :math:`r, r + W, r + 2W, \dots` of the global batch
:math:`b` (:func:`shard`; with a per-rank batch of :math:`|b| / W` these are exactly the rows a
:class:`~torch.utils.data.DistributedSampler` would give it from the same permutation, without its
padding of a short last batch) and computes

.. math::
    L_r = \frac{W}{|b|} \sum_{x \in b_r} \ell(x) + \Omega(\theta)

where :math:`\Omega` is a term of the parameters alone (the EWC penalty), the same on every rank.
DDP all-reduces the gradients and divides by :math:`W`, so every rank applies

.. math::
    \frac{1}{W} \sum_r \nabla L_r = \nabla \Big( \frac{1}{|b|} \sum_{x \in b} \ell(x) + \Omega(\theta) \Big),

the gradient one process computes on the whole batch (up to the order of floating-point sums). The
replicas start from rank 0's parameters (DDP broadcasts them when it wraps the module) and apply
the same update, so they stay identical; :func:`parameter_digest` checks that cheaply.

Sums (:func:`all_reduce_sum_`), not means, cross the ranks for the same reason: a short last batch
gives the ranks unequal shares, and a mean of means would weight them wrongly.

The gradients are dense: DDP all-reduces every parameter's whole gradient at each step, an
embedding table's included (:math:`|E| \cdot D` floats a step however few rows a batch touched).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch import distributed as dist
from torch.nn.parallel import DistributedDataParallel

__all__ = ["process_group", "shard", "all_reduce_sum_", "replicate", "digest", "parameter_digest"]


def process_group() -> tuple[int, int]:
    """``(rank, world size)`` of the default process group; ``(0, 1)`` where none is initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard(batch: Tensor, rank: int, world: int) -> Tensor:
    """Rank ``rank``'s rows of a global batch: ``rank, rank + world, …`` (possibly none).

    Shapes:
        - **batch:** ``(B, *)``; **output:** ``(⌈(B − rank) / world⌉, *)``
    """
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in a world of {world}")
    return batch[rank::world]


def all_reduce_sum_(tensors: Sequence[Tensor]) -> None:
    """Sum each tensor over the ranks of the default process group, in place (a no-op without one)."""
    if process_group()[1] == 1:
        return
    for t in tensors:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)


class _Objective(torch.nn.Module):
    """``fn`` as the forward of a module that owns ``module``: DDP must see the step's forward to
    prepare the gradient all-reduce, and registers ``module``'s parameters through it."""

    def __init__(self, module: torch.nn.Module, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.module = module
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def replicate(module: torch.nn.Module, objective: Callable[..., Any]) -> torch.nn.Module:
    """``objective`` (a function of a batch that uses ``module``'s parameters, returning the loss to
    backpropagate first) run through :class:`~torch.nn.parallel.DistributedDataParallel` over
    ``module``: call the result with the rank's shard; ``backward()`` on its loss all-reduces and
    averages the gradients into ``module``'s parameters.

    Wrapping broadcasts rank 0's parameters and buffers to every rank. Every rank must call it, then
    the result, the same number of times (a rank with an empty shard still takes its step), and every
    parameter must take part in each step's loss. On CUDA the module's device is the replica's (one
    GPU a rank, the NCCL backend); on CPU the gloo backend.
    """
    device = next(module.parameters()).device
    return DistributedDataParallel(_Objective(module, objective),
                                   device_ids=[device] if device.type == "cuda" else None)


def digest(named: Iterable[tuple[str, Tensor]]) -> str:
    """SHA-256 of names and tensor values, in the given order: equal on two replicas exactly when their
    tensors are bit-identical."""
    sha = hashlib.sha256()
    for name, t in named:
        sha.update(name.encode())
        sha.update(t.detach().cpu().contiguous().numpy().tobytes())
    return sha.hexdigest()


def parameter_digest(module: torch.nn.Module) -> str:
    """:func:`digest` of ``module``'s named parameters."""
    return digest(module.named_parameters())
