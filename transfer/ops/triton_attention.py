"""Triton target attention over jagged keys/values (DESIGN §7): online softmax forward, one fused
backward kernel that recomputes the probabilities from the saved log-sum-exp (flash-attention
style) and gives dq, dk and dv in a single pass over each segment. Same conventions as
:mod:`gemkd.transfer.ops.triton_kernels` (one program per segment, ``BLOCK_N`` row tiles, float32
accumulators; CPU tensors need ``TRITON_INTERPRET=1`` before triton is imported)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from gemkd.transfer.ops.triton_common import acc as _acc

__all__ = ["jagged_target_attention"]

_ATTN_TILE = 4096  # elements per [BLOCK_N, D] tile in the attention kernels


@triton.jit
def _attn_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    off_ptr,
    out_ptr,
    lse_ptr,
    D,
    DV,
    ACC: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """Online-softmax target attention of one (pre-scaled) query over its segment."""
    b = tl.program_id(0).to(tl.int64)
    start = tl.load(off_ptr + b)
    end = tl.load(off_ptr + b + 1)
    d = tl.arange(0, BLOCK_D)
    dmask = d < D
    dv = tl.arange(0, BLOCK_DV)
    dvmask = dv < DV
    q = tl.load(q_ptr + b * D + d, mask=dmask, other=0.0).to(ACC)
    m_i = tl.max(tl.full([BLOCK_N], float("-inf"), ACC), axis=0)
    l_i = tl.sum(tl.zeros([BLOCK_N], ACC), axis=0)
    acc = tl.zeros([BLOCK_DV], ACC)
    for i in range(start, end, BLOCK_N):
        rows = i + tl.arange(0, BLOCK_N)
        rmask = rows < end
        k = tl.load(
            k_ptr + rows[:, None] * D + d[None, :], mask=rmask[:, None] & dmask[None, :], other=0.0
        ).to(ACC)
        s = tl.sum(k * q[None, :], axis=1)
        s = tl.where(rmask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v = tl.load(
            v_ptr + rows[:, None] * DV + dv[None, :],
            mask=rmask[:, None] & dvmask[None, :],
            other=0.0,
        ).to(ACC)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m_i = m_new
    nonempty = l_i > 0
    out = tl.where(nonempty, acc / tl.where(nonempty, l_i, 1.0), 0.0)
    tl.store(out_ptr + b * DV + dv, out.to(out_ptr.dtype.element_ty), mask=dvmask)
    tl.store(lse_ptr + b, tl.where(nonempty, m_i + tl.log(tl.where(nonempty, l_i, 1.0)), m_i))


@triton.jit
def _attn_bwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    off_ptr,
    out_ptr,
    lse_ptr,
    do_ptr,
    dq_ptr,
    dk_ptr,
    dv_ptr,
    D,
    DV,
    ACC: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """dq, dk, dv of the target attention in one pass; p is recomputed from the saved lse."""
    b = tl.program_id(0).to(tl.int64)
    start = tl.load(off_ptr + b)
    end = tl.load(off_ptr + b + 1)
    d = tl.arange(0, BLOCK_D)
    dmask = d < D
    dvi = tl.arange(0, BLOCK_DV)
    dvmask = dvi < DV
    q = tl.load(q_ptr + b * D + d, mask=dmask, other=0.0).to(ACC)
    do = tl.load(do_ptr + b * DV + dvi, mask=dvmask, other=0.0).to(ACC)
    o = tl.load(out_ptr + b * DV + dvi, mask=dvmask, other=0.0).to(ACC)
    delta = tl.sum(do * o, axis=0)  # = sum_n p_n (do · v_n)
    lse = tl.load(lse_ptr + b)
    dq = tl.zeros([BLOCK_D], ACC)
    for i in range(start, end, BLOCK_N):
        rows = i + tl.arange(0, BLOCK_N)
        rmask = rows < end
        kmask = rmask[:, None] & dmask[None, :]
        vmask = rmask[:, None] & dvmask[None, :]
        k = tl.load(k_ptr + rows[:, None] * D + d[None, :], mask=kmask, other=0.0).to(ACC)
        v = tl.load(v_ptr + rows[:, None] * DV + dvi[None, :], mask=vmask, other=0.0).to(ACC)
        s = tl.sum(k * q[None, :], axis=1)
        p = tl.where(rmask, tl.exp(s - lse), 0.0)
        dp = tl.sum(v * do[None, :], axis=1)
        ds = p * (dp - delta)
        dv_tile = p[:, None] * do[None, :]
        dk_tile = ds[:, None] * q[None, :]
        dq += tl.sum(ds[:, None] * k, axis=0)
        tl.store(
            dv_ptr + rows[:, None] * DV + dvi[None, :],
            dv_tile.to(dv_ptr.dtype.element_ty),
            mask=vmask,
        )
        tl.store(
            dk_ptr + rows[:, None] * D + d[None, :], dk_tile.to(dk_ptr.dtype.element_ty), mask=kmask
        )
    tl.store(dq_ptr + b * D + d, dq.to(dq_ptr.dtype.element_ty), mask=dmask)


def _attn_blocks(d: int, dv: int) -> tuple[int, int, int]:
    bd, bdv = triton.next_power_of_2(d), triton.next_power_of_2(dv)
    bn = max(16, min(128, _ATTN_TILE // max(bd, bdv)))
    return bn, bd, bdv


class _TargetAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, keys, values, offsets, scale: float):
        acc = torch.float64 if query.dtype == torch.float64 else torch.float32
        # pre-scale the query on the host side ([B, D], cheap) in the accumulator dtype: the
        # kernel then needs no scale argument, which Triton would pass as float32
        qs = (query.to(acc) * scale).contiguous()
        k, v = keys.contiguous(), values.contiguous()
        b, d = qs.shape
        dv = v.shape[1]
        out = v.new_empty((b, dv))
        lse = torch.empty((b,), dtype=acc, device=v.device)
        bn, bd, bdv = _attn_blocks(d, dv)
        _attn_fwd_kernel[(b,)](
            qs,
            k,
            v,
            offsets,
            out,
            lse,
            d,
            dv,
            ACC=_acc(acc),
            BLOCK_N=bn,
            BLOCK_D=bd,
            BLOCK_DV=bdv,
        )
        ctx.save_for_backward(qs, k, v, offsets, out, lse)
        ctx.scale, ctx.q_dtype = scale, query.dtype
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        qs, k, v, offsets, out, lse = ctx.saved_tensors
        b, d = qs.shape
        dv = v.shape[1]
        do = grad.contiguous()
        dqs = torch.empty_like(qs)
        dk = torch.empty_like(k)
        dvv = torch.empty_like(v)
        bn, bd, bdv = _attn_blocks(d, dv)
        _attn_bwd_kernel[(b,)](
            qs,
            k,
            v,
            offsets,
            out,
            lse,
            do,
            dqs,
            dk,
            dvv,
            d,
            dv,
            ACC=_acc(qs.dtype),
            BLOCK_N=bn,
            BLOCK_D=bd,
            BLOCK_DV=bdv,
        )
        dq = (dqs * ctx.scale).to(ctx.q_dtype)
        return dq, dk, dvv, None, None


def jagged_target_attention(
    query: Tensor, keys: Tensor, values: Tensor, offsets: Tensor, scale: float
) -> Tensor:
    """Triton target attention (online softmax); backward: one fused dq/dk/dv kernel."""
    return _TargetAttention.apply(query, keys, values, offsets, scale)
