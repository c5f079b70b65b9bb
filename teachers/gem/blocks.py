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

    The projections are one matmul per distinct input: ``kv(keys)`` split into k and v, and for
    self-attention (``keys is queries``) q, k and v from one matmul over the ``q`` and ``kv``
    weights concatenated (each matmul is ~45 aten ops with its backward, so a step launches
    fewer). The splits are views of the ``[B, L, h, d/h]`` layout SDPA reads, so neither pass
    copies a permuted ``[B, L, 2, h, d/h]`` tensor (on the CPU those copies, mostly the
    backward's, were ~10 % of a GEM training step). The packed, permuted path is
    benchmarks/gem_reference.py's.
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
        if keys is queries:  # self-attention: one matmul for q, k and v
            w = torch.cat([self.q.weight, self.kv.weight])
            q_, k_, v_ = F.linear(queries, w, torch.cat([self.q.bias, self.kv.bias])
                                  ).split(d, dim=-1)
        else:
            q_ = self.q(queries)
            k_, v_ = self.kv(keys).split(d, dim=-1)
        q = q_.view(b, lq, h, d // h).transpose(1, 2)
        k = k_.view(b, lk, h, d // h).transpose(1, 2)
        v = v_.view(b, lk, h, d // h).transpose(1, 2)
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
