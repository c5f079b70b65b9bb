"""Wukong interaction layers (Zhang et al. 2024, "Wukong: Towards a Scaling Law for Large-Scale
Recommendation"): ``X' = LN(concat(FMB(X), LCB(X)) + residual(X))``.

``FMB`` is the optimized factorization machine ``MLP(LN(flatten(X (Xᵀ Y))))`` with a learnable
``Y ∈ R^{n×k}`` (O(nkd) instead of the O(n²d) of ``X Xᵀ``), reshaped to ``n_F`` tokens; ``LCB``
linearly recombines the ``n`` tokens into ``n_L``. When ``n_F + n_L ≠ n`` the residual goes
through a learned token projection.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gemkd.teachers.gem.blocks import mlp


class TokenMix(nn.Module):
    """Linear recombination of ``n_in`` tokens into ``n_out``: ``[B, n_in, d] → [B, n_out, d]``."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        nn.init.normal_(self.weight, std=n_in**-0.5)

    def forward(self, x: Tensor) -> Tensor:
        return torch.matmul(self.weight, x)


class FactorizationMachineBlock(nn.Module):
    """``FMB(X) = MLP(LN(flatten(X (Xᵀ Y))))`` reshaped to ``[B, n_F, d]``."""

    #: ``matmul`` as before the fused path (the reference for tests); an attribute, not a weight
    reference: bool = False

    def __init__(
        self,
        n: int,
        d: int,
        k: int,
        n_F: int,
        mlp_width: int,
        mlp_layers: int = 1,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.n_F, self.d = n_F, d
        self.Y = nn.Parameter(torch.empty(n, k))
        nn.init.normal_(self.Y, std=n**-0.5)
        self.norm = nn.LayerNorm(n * k)
        self.mlp = mlp(n * k, mlp_width, n_F * d, mlp_layers, dropout)

    def interactions(self, x: Tensor) -> Tensor:
        """``X (Xᵀ Y)``: ``[B, n, d] → [B, n, k]`` in O(nkd) per example. Two ``bmm`` over the
        transposed view and the broadcast ``Y``: ``matmul`` would first copy ``Xᵀ`` contiguous
        (more ops forward and backward, the same products)."""
        if self.reference:
            return torch.matmul(x, torch.matmul(x.transpose(1, 2), self.Y))
        xty = torch.bmm(x.transpose(1, 2), self.Y.expand(x.shape[0], -1, -1))
        return torch.bmm(x, xty)

    def forward(self, x: Tensor) -> Tensor:
        z = self.interactions(x).flatten(1)
        return self.mlp(self.norm(z)).view(x.shape[0], self.n_F, self.d)


class WukongLayer(nn.Module):
    """One Wukong layer: ``[B, n_in, d] → [B, n_F + n_L, d]``."""

    #: LCB and the residual projection as two matmuls, as before they were fused (the tests'
    #: reference); an attribute, not a weight
    reference: bool = False

    def __init__(
        self,
        n_in: int,
        d: int,
        n_F: int,
        n_L: int,
        k: int,
        mlp_width: int,
        mlp_layers: int = 1,
        dropout: float = 0.0,
    ):
        super().__init__()
        if n_F < 1 or n_L < 0:
            raise ValueError(f"need n_F >= 1 and n_L >= 0, got n_F={n_F}, n_L={n_L}")
        self.n_in, self.n_out = n_in, n_F + n_L
        self.fmb = FactorizationMachineBlock(n_in, d, k, n_F, mlp_width, mlp_layers, dropout)
        self.lcb = TokenMix(n_in, n_L) if n_L > 0 else None
        self.residual_proj = TokenMix(n_in, self.n_out) if n_in != self.n_out else None
        self.norm = nn.LayerNorm(d)

    def forward(self, x: Tensor) -> Tensor:
        y = self.fmb(x)
        if self.lcb is not None and self.residual_proj is not None and not self.reference:
            # LCB and the residual's projection read the same tokens: one bmm over both mixes
            mix = torch.cat([self.lcb.weight, self.residual_proj.weight])
            z = torch.bmm(mix.expand(x.shape[0], -1, -1), x)
            n_l = self.lcb.weight.shape[0]
            return self.norm(torch.cat([y, z[:, :n_l]], dim=1) + z[:, n_l:])
        if self.lcb is not None:
            y = torch.cat([y, self.lcb(x)], dim=1)
        res = x if self.residual_proj is None else self.residual_proj(x)
        return self.norm(y + res)
