"""Small building blocks shared by the GEM modules: MLP, self-gating, masked attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def mlp(
    in_dim: int, hidden: int, out_dim: int, n_hidden: int = 1, dropout: float = 0.0
) -> nn.Sequential:
    """``in → (Linear, GELU, Dropout) × n_hidden → Linear → out`` (no activation at the end)."""
    layers: list[nn.Module] = []
    width = in_dim
    for _ in range(n_hidden):
        layers += [nn.Linear(width, hidden), nn.GELU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = hidden
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


class Gate(nn.Module):
    """Self-gating ``x ⊙ σ(W x + b)`` applied token-wise (InterFormer's ``Gating``)."""

    def __init__(self, d: int):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(self.proj(x))


class MultiHeadAttention(nn.Module):
    """Multi-head attention of ``queries [B, Lq, d]`` over ``keys [B, Lk, d]``.

    ``key_mask [B, Lk]`` is True where a key is real; masked keys get zero weight. Every query
    must see at least one real key (callers prepend always-valid tokens, e.g. CLS).

    k and v come from the two halves of the ``kv`` projection, each its own matmul: SDPA then
    reads and returns ``[B, L, h, d/h]`` layouts and neither pass copies a permuted ``[B, L, 2,
    h, d/h]`` tensor (on the CPU those copies, mostly the backward's, were ~10 % of a GEM
    training step). The packed, permuted path is benchmarks/gem_reference.py's.
    """

    def __init__(self, d: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d % n_heads:
            raise ValueError(f"d={d} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.dropout = dropout
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)

    def forward(self, queries: Tensor, keys: Tensor, key_mask: Tensor) -> Tensor:
        b, lq, d = queries.shape
        lk = keys.shape[1]
        h = self.n_heads
        q = self.q(queries).view(b, lq, h, d // h).transpose(1, 2)
        w, bias = self.kv.weight, self.kv.bias
        k = F.linear(keys, w[:d], bias[:d]).view(b, lk, h, d // h).transpose(1, 2)
        v = F.linear(keys, w[d:], bias[d:]).view(b, lk, h, d // h).transpose(1, 2)
        o = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=key_mask[:, None, None, :],
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.out(o.transpose(1, 2).reshape(b, lq, d))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x [B, L, d]`` over the positions where ``mask [B, L]`` holds (0 if none)."""
    m = mask.to(x.dtype).unsqueeze(-1)
    return (x * m).sum(1) / m.sum(1).clamp_min(1.0)
