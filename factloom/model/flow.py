"""Question-conditioned relation flow: the message-passing operator the router and reasoner share."""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing

__all__ = ["RelationFlowConv"]


class RelationFlowConv(MessagePassing):
    r"""One hop of entity-score transfer along question-weighted relations (TransferNet-style,
    Shi et al. 2021, https://arxiv.org/abs/2104.07302).

    .. math::
        x'_v = \min\Big(1,\; \bigoplus_{(u, r, v) \in \mathcal{E}} x_u \, w_{(u, r, v)}\Big)

    where :math:`w \in [0, 1]` is the question's attention on the edge's relation at this hop and
    :math:`\oplus` is ``aggr``: ``"add"`` (TransferNet) or ``"max"``, the strongest single path.
    A sum saturates: an entity reached by many weakly attended facts ("the years of the films
    sharing a genre with X", thousands of them) ties at 1 with one reached along the asked relations.
    No parameters: all learning is in the weights handed in.

    Shapes:
        - **x:** ``(N,)`` entity scores; **edge_index:** ``(2, E)``; **edge_weight:** ``(E,)``
        - **output:** ``(N,)``
    """

    def __init__(self, aggr: str = "add") -> None:
        if aggr not in ("add", "max"):
            raise ValueError(f"aggr must be 'add' or 'max', not {aggr!r}")
        super().__init__(aggr=aggr)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor) -> Tensor:
        out = self.propagate(edge_index, x=x.unsqueeze(-1), edge_weight=edge_weight)  # (N, 1)
        return torch.clamp(out.squeeze(-1), max=1.0)

    def message(self, x_j: Tensor, edge_weight: Tensor) -> Tensor:
        return x_j * edge_weight.unsqueeze(-1)  # (E, 1)
