"""ComplEx: the tensor operator under the plausibility scorer (:mod:`factloom.model.scorer`)."""

from __future__ import annotations

import torch

__all__ = ["ComplEx"]


class ComplEx(torch.nn.Module):
    r"""ComplEx embeddings with reciprocal relations (Trouillon et al. 2016,
    https://arxiv.org/abs/1606.06357; reciprocals and N3 as in Lacroix et al. 2018,
    https://arxiv.org/abs/1806.07297).

    .. math::
        \phi(h, r, t) = \operatorname{Re}\bigl(\langle e_h, w_r, \bar e_t \rangle\bigr)
            = \langle \operatorname{Re} q, \operatorname{Re} e_t \rangle
            + \langle \operatorname{Im} q, \operatorname{Im} e_t \rangle,
        \qquad q = e_h \odot w_r

    Each embedding row holds the real half, then the imaginary half. Every relation ``r`` has a
    reciprocal row ``r + n_rel`` that answers ``(?, r, t)`` as ``(t, r^{-1}, ?)``, so one 1-N softmax
    over tails trains both directions. :meth:`loss` returns, beside the cross-entropy, the moduli
    :math:`|e_h|, |w_r|, |e_t|` the N3 penalty :math:`\sum |\cdot|^3` is taken of.

    Args:
        n_ent: entities.
        n_rel: relations (the table holds ``2 * n_rel`` rows: forward, then reciprocal).
        rank: complex dimensions per embedding.
        init: scale of the initial :math:`\mathcal{N}(0, 1)` values (default ``1e-3``: near the origin).

    Shapes:
        - **h, r, t:** ``(B,)`` ids
        - **query:** ``(B, rank)`` twice, and the four ``(B, rank)`` parts of ``e_h``, ``w_r``
        - **all_tails:** ``(B, n_ent)``; **pair:** ``(B,)``
        - **loss:** ``b`` ``(B, 3)`` facts; a scalar, and three ``(B, rank)`` factors
    """

    def __init__(self, n_ent: int, n_rel: int, rank: int, init: float = 1e-3) -> None:
        super().__init__()
        self.rank = rank
        self.ent = torch.nn.Embedding(n_ent, 2 * rank)
        self.rel = torch.nn.Embedding(2 * n_rel, 2 * rank)  # forward + reciprocal
        with torch.no_grad():
            self.ent.weight.mul_(init)
            self.rel.weight.mul_(init)

    def _parts(self, h: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        e, w = self.ent(h), self.rel(r)  # (B, 2R)
        return e[:, : self.rank], e[:, self.rank :], w[:, : self.rank], w[:, self.rank :]

    def query(self, h: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        hr, hi, rr, ri = self._parts(h, r)
        qr = hr * rr - hi * ri  # (B, R)
        qi = hr * ri + hi * rr
        return qr, qi, (hr, hi, rr, ri)

    def all_tails(self, h: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        qr, qi, parts = self.query(h, r)
        er, ei = self.ent.weight[:, : self.rank], self.ent.weight[:, self.rank :]
        return qr @ er.T + qi @ ei.T, parts  # (B, E)

    def pair(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        qr, qi, _ = self.query(h, r)
        e = self.ent(t)
        return (qr * e[:, : self.rank] + qi * e[:, self.rank :]).sum(-1)  # (B,)

    def loss(self, b: torch.Tensor, negatives: int | None,
             reduction: str = "mean") -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Softmax cross-entropy of the tails of ``b`` (B, 3), its mean (``reduction="sum"``: its sum,
        0 for no rows), and the N3 factors (B, R) it touched.

        ``negatives``: the softmax runs over the true tail and that many entities sampled for the
        whole batch instead of over every entity (``None``, or at least as many as there are)."""
        n_ent = self.ent.num_embeddings
        tail = self.ent(b[:, 2])  # (B, 2R)
        if negatives is None or negatives >= n_ent:
            logits, parts = self.all_tails(b[:, 0], b[:, 1])
            loss = torch.nn.functional.cross_entropy(logits, b[:, 2], reduction=reduction)
        else:
            qr, qi, parts = self.query(b[:, 0], b[:, 1])
            neg = self.ent(torch.randint(n_ent, (negatives,), device=b.device))  # (K, 2R)
            own = (qr * tail[:, : self.rank] + qi * tail[:, self.rank :]).sum(-1, keepdim=True)  # (B, 1)
            sampled = qr @ neg[:, : self.rank].T + qi @ neg[:, self.rank :].T  # (B, K)
            loss = torch.nn.functional.cross_entropy(torch.cat([own, sampled], 1),
                                                     torch.zeros(len(b), dtype=torch.long, device=b.device),
                                                     reduction=reduction)
        factors = [torch.sqrt(parts[0] ** 2 + parts[1] ** 2), torch.sqrt(parts[2] ** 2 + parts[3] ** 2),
                   torch.sqrt(tail[:, : self.rank] ** 2 + tail[:, self.rank :] ** 2)]
        return loss, factors
