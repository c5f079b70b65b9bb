"""Triton kernels for the jagged ops, wrapped in ``torch.autograd.Function``\\ s (DESIGN §7).

Layout: one program per segment (times a block of feature columns where that parallelises),
looping over the segment's rows in ``BLOCK_N`` tiles, so the work is O(N · D) whatever the length
distribution and nothing is ever padded to the batch max. Accumulators are float32 (float64 for
float64 inputs); outputs are cast back to the input dtype.

On CPU tensors the kernels run in the Triton interpreter, which needs ``TRITON_INTERPRET=1``
in the environment *before triton is first imported*: ``triton.jit`` (for these kernels and for
``triton.language``'s own helpers such as ``tl.sum``) picks interpreted or compiled at import.
``gemkd.transfer.ops.dispatch`` checks this and says so instead of failing inside the interpreter.

Backward passes:
- segment sum/mean: a broadcast kernel (``_segment_bcast_kernel``).
- segment max: a torch ``scatter`` of the output gradient to the argmax rows that the forward
  kernel saved (one memory-bound op; a kernel would not be faster).
- jagged↔padded: each direction's backward is the other direction's kernel.
- target attention: :mod:`gemkd.transfer.ops.triton_attention`.

Callers (``gemkd.transfer.ops``) validate inputs and route degenerate shapes (B == 0, N == 0,
D == 0) to the reference, so every launch here has a non-empty grid and non-empty tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from gemkd.transfer.ops.triton_attention import jagged_target_attention
from gemkd.transfer.ops.triton_common import BLOCK_N as _BLOCK_N
from gemkd.transfer.ops.triton_common import acc as _acc

__all__ = [
    "jagged_target_attention",
    "jagged_to_padded",
    "padded_to_jagged",
    "segment_max",
    "segment_mean",
    "segment_sum",
]

_MAX_BLOCK_D = 64  # feature columns per program for the column-parallel kernels


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------


@triton.jit
def _segment_reduce_kernel(
    v_ptr,
    off_ptr,
    out_ptr,
    D,
    MEAN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """out[b, cols] = sum (or mean) of v[offsets[b]:offsets[b+1], cols]."""
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    start = tl.load(off_ptr + b)
    end = tl.load(off_ptr + b + 1)
    acc = tl.zeros([BLOCK_D], ACC)
    for i in range(start, end, BLOCK_N):
        rows = i + tl.arange(0, BLOCK_N)
        m = (rows < end)[:, None] & cmask[None, :]
        x = tl.load(v_ptr + rows[:, None] * D + cols[None, :], mask=m, other=0.0)
        acc += tl.sum(x.to(ACC), axis=0)
    if MEAN:
        acc = acc / tl.maximum(end - start, 1).to(ACC)
    tl.store(out_ptr + b * D + cols, acc.to(out_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _segment_bcast_kernel(
    g_ptr,
    off_ptr,
    out_ptr,
    D,
    MEAN: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """out[offsets[b]:offsets[b+1], cols] = g[b, cols] (/ length): backward of sum/mean."""
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    start = tl.load(off_ptr + b)
    end = tl.load(off_ptr + b + 1)
    g = tl.load(g_ptr + b * D + cols, mask=cmask, other=0.0).to(ACC)
    if MEAN:
        g = g / tl.maximum(end - start, 1).to(ACC)
    tile = (tl.zeros([BLOCK_N, BLOCK_D], ACC) + g[None, :]).to(out_ptr.dtype.element_ty)
    for i in range(start, end, BLOCK_N):
        rows = i + tl.arange(0, BLOCK_N)
        m = (rows < end)[:, None] & cmask[None, :]
        tl.store(out_ptr + rows[:, None] * D + cols[None, :], tile, mask=m)


@triton.jit
def _segment_max_kernel(
    v_ptr,
    off_ptr,
    out_ptr,
    arg_ptr,
    N,
    D,
    ACC: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """out[b, c] = max of the segment's column c, arg[b, c] = its first argmax row (N if empty)."""
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    start = tl.load(off_ptr + b)
    end = tl.load(off_ptr + b + 1)
    best = tl.full([BLOCK_D], float("-inf"), ACC)
    best_i = tl.zeros([BLOCK_D], tl.int64) + N
    for i in range(start, end, BLOCK_N):
        rows = i + tl.arange(0, BLOCK_N)
        m = (rows < end)[:, None] & cmask[None, :]
        x = tl.load(v_ptr + rows[:, None] * D + cols[None, :], mask=m, other=float("-inf"))
        x = x.to(ACC)
        tile_max = tl.max(x, axis=0)
        hit = m & (x == tile_max[None, :])
        tile_arg = tl.min(tl.where(hit, rows[:, None], N), axis=0)
        # strict '>' keeps the first occurrence across tiles; best_i == N takes the first tile
        upd = (tile_max > best) | (best_i == N)
        best = tl.where(upd, tile_max, best)
        best_i = tl.where(upd, tile_arg, best_i)
    out = tl.where(best_i < N, best, 0.0)
    tl.store(out_ptr + b * D + cols, out.to(out_ptr.dtype.element_ty), mask=cmask)
    tl.store(arg_ptr + b * D + cols, best_i, mask=cmask)


@triton.jit
def _jagged_to_padded_kernel(
    v_ptr,
    off_ptr,
    pad_ptr,
    out_ptr,
    L,
    D,
    BLOCK_L: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """out[b, p, c] = v[offsets[b] + p, c] if p < min(len_b, L) else padding."""
    b = tl.program_id(0).to(tl.int64)
    pos = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
    cols = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    start = tl.load(off_ptr + b)
    end = tl.load(off_ptr + b + 1)
    valid = pos < tl.minimum(end - start, L)
    x = tl.load(
        v_ptr + (start + pos)[:, None] * D + cols[None, :], mask=valid[:, None] & cmask[None, :]
    )
    pad = tl.load(pad_ptr)
    x = tl.where(valid[:, None], x, pad)
    out_rows = b * L + pos
    tl.store(
        out_ptr + out_rows[:, None] * D + cols[None, :], x, mask=(pos < L)[:, None] & cmask[None, :]
    )


@triton.jit
def _padded_to_jagged_kernel(
    p_ptr,
    off_ptr,
    out_ptr,
    L,
    D,
    BLOCK_L: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """out[offsets[b] + p, c] = padded[b, p, c] for p < min(len_b, L); the rest is left alone."""
    b = tl.program_id(0).to(tl.int64)
    pos = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
    cols = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    start = tl.load(off_ptr + b)
    end = tl.load(off_ptr + b + 1)
    m = (pos < tl.minimum(end - start, L))[:, None] & cmask[None, :]
    x = tl.load(p_ptr + (b * L + pos)[:, None] * D + cols[None, :], mask=m)
    tl.store(out_ptr + (start + pos)[:, None] * D + cols[None, :], x, mask=m)


# --------------------------------------------------------------------------------------------
# host side
# --------------------------------------------------------------------------------------------


def _block_d(d: int) -> int:
    return min(triton.next_power_of_2(d), _MAX_BLOCK_D)


def _as_2d(x: Tensor) -> Tensor:
    return (x.unsqueeze(1) if x.dim() == 1 else x).contiguous()


class _SegmentReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values: Tensor, offsets: Tensor, mean: bool) -> Tensor:
        v = _as_2d(values)
        n, d = v.shape
        b = offsets.shape[0] - 1
        out = v.new_empty((b, d))
        bd = _block_d(d)
        _segment_reduce_kernel[(b, triton.cdiv(d, bd))](
            v,
            offsets,
            out,
            d,
            MEAN=mean,
            ACC=_acc(v.dtype),
            BLOCK_N=_BLOCK_N,
            BLOCK_D=bd,
        )
        ctx.save_for_backward(offsets)
        ctx.mean, ctx.n, ctx.squeeze = mean, n, values.dim() == 1
        return out.squeeze(1) if ctx.squeeze else out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (offsets,) = ctx.saved_tensors
        g = _as_2d(grad)
        b, d = g.shape
        gv = g.new_empty((ctx.n, d))
        bd = _block_d(d)
        _segment_bcast_kernel[(b, triton.cdiv(d, bd))](
            g,
            offsets,
            gv,
            d,
            MEAN=ctx.mean,
            ACC=_acc(g.dtype),
            BLOCK_N=_BLOCK_N,
            BLOCK_D=bd,
        )
        return (gv.squeeze(1) if ctx.squeeze else gv), None, None


class _SegmentMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values: Tensor, offsets: Tensor) -> Tensor:
        v = _as_2d(values)
        n, d = v.shape
        b = offsets.shape[0] - 1
        out = v.new_empty((b, d))
        arg = torch.empty((b, d), dtype=torch.int64, device=v.device)
        bd = _block_d(d)
        _segment_max_kernel[(b, triton.cdiv(d, bd))](
            v, offsets, out, arg, n, d, ACC=_acc(v.dtype), BLOCK_N=_BLOCK_N, BLOCK_D=bd
        )
        ctx.save_for_backward(arg)
        ctx.n, ctx.squeeze = n, values.dim() == 1
        return out.squeeze(1) if ctx.squeeze else out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (arg,) = ctx.saved_tensors
        g = _as_2d(grad)
        # row n collects the (zero-valued) "gradient" of empty segments and is dropped
        gv = g.new_zeros((ctx.n + 1, g.shape[1])).scatter_(0, arg, g)[: ctx.n]
        return (gv.squeeze(1) if ctx.squeeze else gv), None


def _j2p_launch(v: Tensor, offsets: Tensor, max_len: int, pad: Tensor) -> Tensor:
    n, d = v.shape
    b = offsets.shape[0] - 1
    out = v.new_empty((b, max_len, d))
    bd = _block_d(d)
    bl = max(16, min(128, 4096 // bd))
    grid = (b, triton.cdiv(max_len, bl), triton.cdiv(d, bd))
    _jagged_to_padded_kernel[grid](v, offsets, pad, out, max_len, d, BLOCK_L=bl, BLOCK_D=bd)
    return out


def _p2j_launch(p: Tensor, offsets: Tensor, total_len: int) -> Tensor:
    b, seq, d = p.shape
    out = p.new_zeros((total_len, d))  # zeros: rows past position L are not written
    bd = _block_d(d)
    bl = max(16, min(128, 4096 // bd))
    grid = (b, triton.cdiv(seq, bl), triton.cdiv(d, bd))
    _padded_to_jagged_kernel[grid](p, offsets, out, seq, d, BLOCK_L=bl, BLOCK_D=bd)
    return out


class _JaggedToPadded(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values: Tensor, offsets: Tensor, max_len: int, padding_value: float):
        v = _as_2d(values)
        pad = torch.full((1,), padding_value, dtype=v.dtype, device=v.device)
        out = _j2p_launch(v, offsets, max_len, pad)
        ctx.save_for_backward(offsets)
        ctx.n, ctx.squeeze = v.shape[0], values.dim() == 1
        return out.squeeze(2) if ctx.squeeze else out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (offsets,) = ctx.saved_tensors
        g = (grad.unsqueeze(2) if ctx.squeeze else grad).contiguous()
        gv = _p2j_launch(g, offsets, ctx.n)
        return (gv.squeeze(1) if ctx.squeeze else gv), None, None, None


class _PaddedToJagged(torch.autograd.Function):
    @staticmethod
    def forward(ctx, padded: Tensor, offsets: Tensor, total_len: int):
        squeeze = padded.dim() == 2
        p = (padded.unsqueeze(2) if squeeze else padded).contiguous()
        out = _p2j_launch(p, offsets, total_len)
        ctx.save_for_backward(offsets)
        ctx.seq, ctx.squeeze = p.shape[1], squeeze
        return out.squeeze(1) if squeeze else out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (offsets,) = ctx.saved_tensors
        g = _as_2d(grad)
        pad = torch.zeros((1,), dtype=g.dtype, device=g.device)
        gp = _j2p_launch(g, offsets, ctx.seq, pad)
        return (gp.squeeze(2) if ctx.squeeze else gp), None, None


# --------------------------------------------------------------------------------------------
# entry points (inputs already validated by gemkd.transfer.ops)
# --------------------------------------------------------------------------------------------


def segment_sum(values: Tensor, offsets: Tensor) -> Tensor:
    """Triton segment sum; backward: broadcast kernel."""
    return _SegmentReduce.apply(values, offsets, False)


def segment_mean(values: Tensor, offsets: Tensor) -> Tensor:
    """Triton segment mean (empty → 0); backward: broadcast kernel scaled by 1/length."""
    return _SegmentReduce.apply(values, offsets, True)


def segment_max(values: Tensor, offsets: Tensor) -> Tensor:
    """Triton segment max (empty → 0); backward: torch scatter to the saved argmax rows."""
    return _SegmentMax.apply(values, offsets)


def jagged_to_padded(
    values: Tensor, offsets: Tensor, max_len: int, padding_value: float = 0.0
) -> Tensor:
    """Triton jagged→padded; backward: the padded→jagged kernel."""
    return _JaggedToPadded.apply(values, offsets, max_len, padding_value)


def padded_to_jagged(padded: Tensor, offsets: Tensor, total_len: int) -> Tensor:
    """Triton padded→jagged; backward: the jagged→padded kernel (padding 0)."""
    return _PaddedToJagged.apply(padded, offsets, total_len)
