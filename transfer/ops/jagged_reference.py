"""PyTorch reference implementations of the jagged ops (DESIGN §7).

These are the ground truth the Triton kernels are tested against, and the implementation used on
CPU. They are written from dense, differentiable torch primitives (``index_add``, ``gather``,
indexing) so autograd derives every backward, and so that no function needs a host sync: segment
ids come from ``repeat_interleave(..., output_size=N)`` with ``N = values.shape[0]`` already known
on the host.

Inputs are assumed valid (``gemkd.transfer.ops`` validates them once, before dispatch): ``offsets``
is a 1-D int64 tensor ``[B+1]`` on the values' device with ``offsets[0] == 0``, ``offsets[-1] == N``
and non-decreasing entries. Reductions accumulate in float32 for fp16/bf16/fp32 inputs (float64 for
float64 inputs) and cast back to the input dtype.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "jagged_target_attention",
    "jagged_to_padded",
    "lengths_to_mask",
    "padded_to_jagged",
    "segment_ids",
    "segment_max",
    "segment_mean",
    "segment_sum",
]


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulator dtype: float64 stays float64, everything else accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def segment_ids(offsets: Tensor, n: int) -> Tensor:
    """``[N]`` int64: the segment each of the ``n`` values belongs to (no host sync)."""
    lengths = offsets[1:] - offsets[:-1]
    batch = torch.arange(lengths.shape[0], device=offsets.device)
    return torch.repeat_interleave(batch, lengths, output_size=n)


def _lengths(offsets: Tensor) -> Tensor:
    return offsets[1:] - offsets[:-1]


def segment_sum(values: Tensor, offsets: Tensor) -> Tensor:
    """``[N(, D)] -> [B(, D)]``: sum of each segment; empty segments give 0."""
    n, b = values.shape[0], offsets.shape[0] - 1
    acc = acc_dtype(values.dtype)
    out = values.new_zeros((b, *values.shape[1:]), dtype=acc)
    out = out.index_add(0, segment_ids(offsets, n), values.to(acc))
    return out.to(values.dtype)


def segment_mean(values: Tensor, offsets: Tensor) -> Tensor:
    """``[N(, D)] -> [B(, D)]``: mean of each segment; empty segments give 0 (not NaN)."""
    n, b = values.shape[0], offsets.shape[0] - 1
    acc = acc_dtype(values.dtype)
    total = values.new_zeros((b, *values.shape[1:]), dtype=acc)
    total = total.index_add(0, segment_ids(offsets, n), values.to(acc))
    count = _lengths(offsets).clamp_min(1).to(acc)
    count = count.view(b, *([1] * (values.dim() - 1)))
    return (total / count).to(values.dtype)


def segment_max(values: Tensor, offsets: Tensor) -> Tensor:
    """``[N(, D)] -> [B(, D)]``: elementwise max of each segment; empty segments give 0.

    The output is a ``gather`` of the argmax rows (first occurrence on ties), so the gradient
    flows to exactly one element per segment and column, as in the Triton kernel. NaN inputs
    are not supported (the result for a column containing NaN is unspecified).
    """
    squeeze = values.dim() == 1
    v = values.unsqueeze(1) if squeeze else values
    n, d = v.shape
    b = offsets.shape[0] - 1
    with torch.no_grad():
        seg = segment_ids(offsets, n).unsqueeze(1).expand(n, d)
        best = v.new_full((b, d), -math.inf).scatter_reduce(
            0, seg, v, reduce="amax", include_self=False
        )
        rows = torch.arange(n, device=v.device).unsqueeze(1).expand(n, d)
        cand = torch.where(v == best.gather(0, seg), rows, n)
        arg = torch.full((b, d), n, dtype=torch.int64, device=v.device)
        arg = arg.scatter_reduce(0, seg, cand, reduce="amin", include_self=True)
    # row n is a zero row: empty segments (arg == n) read 0 and send no gradient anywhere
    padded = torch.cat([v, v.new_zeros((1, d))], dim=0)
    out = padded.gather(0, arg)
    return out.squeeze(1) if squeeze else out


def jagged_to_padded(
    values: Tensor, offsets: Tensor, max_len: int, padding_value: float = 0.0
) -> Tensor:
    """``[N(, D)] -> [B, max_len(, D)]``; longer segments keep their first ``max_len`` values."""
    n = values.shape[0]
    lengths = _lengths(offsets)
    pos = torch.arange(max_len, device=values.device)
    idx = offsets[:-1].unsqueeze(1) + pos.unsqueeze(0)
    idx = torch.where(pos.unsqueeze(0) < lengths.unsqueeze(1), idx, n)
    # index n is one extra row holding padding_value
    pad_row = values.new_full((1, *values.shape[1:]), padding_value)
    return torch.cat([values, pad_row], dim=0)[idx]


def padded_to_jagged(padded: Tensor, offsets: Tensor, total_len: int) -> Tensor:
    """``[B, L(, D)] -> [total_len(, D)]``, the inverse of ``jagged_to_padded``.

    Values of a segment past position ``L`` (it was truncated when padded) come back as 0.
    """
    b, seq = padded.shape[0], padded.shape[1]
    tail = padded.shape[2:]
    seg = segment_ids(offsets, total_len)
    pos = torch.arange(total_len, device=padded.device) - offsets[seg]
    idx = torch.where(pos < seq, seg * seq + pos, b * seq)
    flat = torch.cat([padded.reshape(b * seq, *tail), padded.new_zeros((1, *tail))], dim=0)
    return flat[idx]


def lengths_to_mask(offsets: Tensor, max_len: int) -> Tensor:
    """``bool [B, max_len]``: True where position < segment length."""
    pos = torch.arange(max_len, device=offsets.device)
    return pos.unsqueeze(0) < _lengths(offsets).unsqueeze(1)


def jagged_target_attention(
    query: Tensor, keys: Tensor, values: Tensor, offsets: Tensor, scale: float | None = None
) -> Tensor:
    """``softmax(q_b · K_bᵀ · scale) V_b`` per segment: ``[B, D], [N, D], [N, Dv] -> [B, Dv]``.

    Max-subtracted per segment and accumulated in float32 (float64 for float64 inputs); empty
    segments give zeros. ``scale`` defaults to ``1 / sqrt(D)``.
    """
    n, b = keys.shape[0], query.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[1])
    acc = acc_dtype(query.dtype)
    seg = segment_ids(offsets, n)
    scores = (query.to(acc)[seg] * keys.to(acc)).sum(-1) * scale
    with torch.no_grad():  # the shift cancels in the softmax: no gradient needed through it
        smax = scores.new_full((b,), -math.inf).scatter_reduce(
            0, seg, scores, reduce="amax", include_self=False
        )
    weights = torch.exp(scores - smax[seg])
    denom = weights.new_zeros(b).index_add(0, seg, weights)
    probs = weights / denom[seg]
    out = values.new_zeros((b, values.shape[1]), dtype=acc)
    out = out.index_add(0, seg, probs.unsqueeze(1) * values.to(acc))
    return out.to(values.dtype)
