"""InterFormer cross layers (Zeng et al. 2024, "InterFormer: Towards Effective Heterogeneous
Interaction Learning for Click-Through Rate Prediction"), interleaved with Wukong.

Each layer exchanges information both ways:
- the non-sequence summary ``X_sum = Gating(MLP(X))`` conditions the sequence: a personalized
  FFN on every sequence token (its hidden layer modulated by ``X_sum``), then multi-head attention
  over ``[CLS ‖ X_sum ‖ S]`` with key-padding masks from the jagged lengths;
- the sequence summary ``S_sum = Gating([CLS ‖ PMA(S) ‖ recent(S)])`` (pooling by multi-head
  attention with learnable seeds; the last few tokens) goes back to the non-sequence arm, where it
  is appended to the tokens of the next Wukong layer.
Padding positions are kept at zero and never used as keys, so they cannot change any output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gemkd.teachers.gem.blocks import Gate, MultiHeadAttention, mlp


class NonSequenceSummary(nn.Module):
    """``X_sum = Gating(MLP(flatten(X)))``: ``[B, n_x, d] → [B, n_xsum, d]``."""

    def __init__(self, n_x: int, d: int, n_xsum: int, mlp_width: int, dropout: float = 0.0):
        super().__init__()
        self.n_xsum, self.d = n_xsum, d
        self.mlp = mlp(n_x * d, mlp_width, n_xsum * d, 1, dropout)
        self.gate = Gate(d)

    def forward(self, x: Tensor) -> Tensor:
        return self.gate(self.mlp(x.flatten(1)).view(x.shape[0], self.n_xsum, self.d))


class PersonalizedFFN(nn.Module):
    """Token-wise FFN whose hidden units are scaled and shifted by the non-sequence summary."""

    def __init__(self, d: int, n_xsum: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.film = nn.Linear(n_xsum * d, 2 * hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, s: Tensor, xsum: Tensor) -> Tensor:
        scale, shift = self.film(xsum.flatten(1)).unsqueeze(1).chunk(2, dim=-1)
        h = F.gelu(self.fc1(self.norm(s)) * (1 + scale) + shift)
        return self.fc2(self.drop(h))


class SequenceSummary(nn.Module):
    """``S_sum = Gating([CLS ‖ PMA(S) ‖ recent(S)])``: ``[B, n_cls + n_pma + n_recent, d]``.

    PMA's keys are ``[CLS ‖ S]`` so an empty history still has something to attend to.
    """

    def __init__(
        self, d: int, n_heads: int, n_cls: int, n_pma: int, n_recent: int, dropout: float = 0.0
    ):
        super().__init__()
        self.n_recent = n_recent
        self.n_tokens = n_cls + n_pma + n_recent
        self.seeds = nn.Parameter(torch.randn(n_pma, d) * d**-0.5) if n_pma > 0 else None
        self.norm = nn.LayerNorm(d)
        self.pma = MultiHeadAttention(d, n_heads, dropout) if n_pma > 0 else None
        self.gate = Gate(d)

    def forward(self, cls: Tensor, s: Tensor, mask: Tensor) -> Tensor:
        b = s.shape[0]
        parts = [cls]
        if self.pma is not None:
            assert self.seeds is not None  # built with the pma
            kv = self.norm(torch.cat([cls, s], dim=1))
            kv_mask = torch.cat([mask.new_ones(b, cls.shape[1]), mask], dim=1)
            parts.append(self.pma(self.seeds.expand(b, -1, -1), kv, kv_mask))
        if self.n_recent > 0:
            parts.append(s[:, -self.n_recent :])  # padding positions are zero
        return self.gate(torch.cat(parts, dim=1))


class InterFormerLayer(nn.Module):
    """One cross layer: ``(X, S, mask, CLS) → (S', CLS', S_sum | None)``.

    ``summarize=False`` builds no ``S_sum`` path (for a model without a non-sequence arm to feed).
    """

    def __init__(
        self,
        n_x: int,
        d: int,
        n_heads: int,
        n_cls: int,
        n_xsum: int,
        n_pma: int,
        n_recent: int,
        mlp_width: int,
        ffn_mult: int = 2,
        dropout: float = 0.0,
        summarize: bool = True,
    ):
        super().__init__()
        self.n_cls, self.n_xsum = n_cls, n_xsum
        self.x_summary = NonSequenceSummary(n_x, d, n_xsum, mlp_width, dropout)
        self.pffn = PersonalizedFFN(d, n_xsum, ffn_mult * d, dropout)
        self.attn_norm = nn.LayerNorm(d)
        self.attn = MultiHeadAttention(d, n_heads, dropout)
        self.summary = (
            SequenceSummary(d, n_heads, n_cls, n_pma, n_recent, dropout) if summarize else None
        )

    def forward(
        self, x: Tensor, s: Tensor, mask: Tensor, cls: Tensor
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        b = s.shape[0]
        m = mask.unsqueeze(-1).to(s.dtype)
        xsum = self.x_summary(x)
        s = (s + self.pffn(s, xsum)) * m
        z = self.attn_norm(torch.cat([cls, xsum, s], dim=1))
        z_mask = torch.cat([mask.new_ones(b, self.n_cls + self.n_xsum), mask], dim=1)
        out = self.attn(z, z, z_mask)  # the X_sum rows' outputs are computed and dropped
        cls = cls + out[:, : self.n_cls]
        s = (s + out[:, self.n_cls + self.n_xsum :]) * m
        s_sum = self.summary(cls, s, mask) if self.summary is not None else None
        return s, cls, s_sum
