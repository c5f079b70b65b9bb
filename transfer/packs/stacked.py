"""Building blocks of a student that runs K stacked copies of itself in one set of ops.

Why: a pack's members share every batch; under ``torch.func.vmap`` each op of a tiny student
pays the transform's wrapping, batching rule and copies, several times the op's own cost at
batch 256 on the CPU. A student with a stacked forward registered for its class
(:mod:`gemkd.transfer.packs.stacked_students`) runs its layers on parameters with a leading
member dimension ``K`` through these functions instead: ``[K, B, ...]`` activations, one kernel
per op for all members, and every use of an embedding table in one gather or embedding bag over
the table's flat ``[K·R, d]`` view (the tables are most of a step's memory traffic).

Each member's slice is computed as its own: batched matmuls compute each member's product by
itself (a single member as the first of two copies: :func:`linear`), the gathers and bags treat
each member's rows and bags on their own and add a row's gradients in event order, and
elementwise ops are elementwise, so a member's numbers do not depend on K (a pack of one, a run
alone, gives the same bits: ``tests/transfer/packs/test_stacked.py``, ``tests/experiments/
test_packs.py``). They differ from the unstacked module's in the last bits (other kernels), as a
vmapped pack's do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from gemkd.transfer.ops import jagged_target_attention
from gemkd.transfer.ops.jagged_reference import segment_ids


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``[K, B, in]`` (or a shared ``[B, in]``) through ``weight [K, out, in]`` and ``bias
    [K, out]`` → ``[K, B, out]``.

    One member (a run alone) is multiplied as the first of two copies of itself: the CPU's
    batched matmul takes another kernel for a batch of one, and its last bits differ where a
    dimension is 1 (one output, the serving head of one task; one input), so a run alone would
    not be a pack's member bit for bit (the second copy's gradient is an exact zero). The bias
    is added after the matmul (:class:`_AddBias`)."""
    k = weight.shape[0]
    if x.dim() == 2:
        x = x.unsqueeze(0).expand(k, *x.shape)
    if k == 1:
        out = torch.bmm(x.expand(2, *x.shape[1:]),
                        weight.expand(2, *weight.shape[1:]).transpose(1, 2))[:1]
    else:
        out = torch.bmm(x, weight.transpose(1, 2))
    return out if bias is None else _AddBias.apply(out, bias)


class _AddBias(torch.autograd.Function):
    """``y [K, B, N] + bias [K, N]`` per member, the bias's gradient each member's sum of its
    rows' gradients (a contiguous sum over B: the order a broadcast's reduction takes inside
    autograd was not the same for every K)."""

    @staticmethod
    def forward(ctx: Any, y: Tensor, bias: Tensor) -> Tensor:
        return y + bias.unsqueeze(1)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        return grad, grad.contiguous().sum(1)


def segment_mean(values: Tensor, offsets: Tensor) -> Tensor:
    """``[K, N, d] → [K, B, d]``: the mean of each segment of every member's values (0 for an
    empty segment), as :func:`gemkd.transfer.ops.jagged_reference.segment_mean` computes one
    member's (one ``index_add`` over the flat ``[K·N, d]`` rows, member k's segments shifted by
    k·B)."""
    k, n = values.shape[0], values.shape[1]
    b = offsets.shape[0] - 1
    seg = (segment_ids(offsets, n).unsqueeze(0) + _member_shift(k, b, offsets.device)
           ).reshape(-1)
    tail = values.shape[2:]
    total = values.new_zeros((k * b, *tail)).index_add(0, seg, values.reshape(k * n, *tail))
    count = (offsets[1:] - offsets[:-1]).clamp_min(1).to(values.dtype)
    return total.view(k, b, *tail) / count.view(1, b, *([1] * len(tail)))


def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None,
               eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last dimension with each member's affine ``[K, F]``."""
    y = F.layer_norm(x, (x.shape[-1],), None, None, eps)
    if weight is not None:
        y = y * weight.unsqueeze(1)
    if bias is not None:
        y = y + bias.unsqueeze(1)
    return y


def mlp(params: Mapping[str, Tensor], prefix: str, x: Tensor, layers: int) -> Tensor:
    """``Linear → ReLU`` ``layers`` times, the parameters of layer i at
    ``{prefix}.{2i}.weight`` / ``.bias`` (an ``nn.Sequential`` of Linear and ReLU, as
    :func:`gemkd.students.student_base.mlp` builds it)."""
    for i in range(layers):
        x = torch.relu(linear(x, params[f"{prefix}.{2 * i}.weight"],
                              params.get(f"{prefix}.{2 * i}.bias")))
    return x


def target_attention(query: Tensor, values: Tensor, offsets: Tensor) -> Tensor:
    """``softmax(q · v_i / sqrt(d)) v`` per segment for every member: ``query [K, B, d]``,
    ``values [K, N, d]`` (keys and values), shared ``offsets [B+1]`` → ``[K, B, d]``. The
    members are folded into K·B segments of one jagged call, each segment computed as its own."""
    k, b, n = query.shape[0], query.shape[1], values.shape[1]
    shift = torch.arange(k, device=offsets.device).mul_(n).unsqueeze(1)
    folded = torch.cat([(offsets[:-1].unsqueeze(0) + shift).reshape(-1),
                        offsets.new_full((1,), k * n)])
    flat = values.reshape(k * n, *values.shape[2:])
    out = jagged_target_attention(query.reshape(k * b, -1), flat, flat, folded)
    return out.view(k, b, *out.shape[1:])


def _member_shift(k: int, step: int, device: torch.device) -> Tensor:
    """``[K, 1]``: member k's offset ``k · step`` into a flattened ``[K · step, ...]`` tensor."""
    return torch.arange(k, device=device).mul_(step).unsqueeze(1)


def _sparse_rows(flat_rows: Tensor, values: Tensor, shape: torch.Size) -> Tensor:
    """The row-sparse gradient ``[K, R, d]`` (coalesced) whose rows of the flat ``[K·R, d]``
    view ``flat_rows`` (ascending, each once) hold ``values [U, d]``."""
    k, r, d = shape
    index = torch.stack([torch.div(flat_rows, r, rounding_mode="floor"), flat_rows % r])
    return torch.sparse_coo_tensor(index, values, (k, r, d), is_coalesced=True,
                                   check_invariants=False)


class _Lookups(torch.autograd.Function):
    """Rows ``ids`` of every member's table ``[K, R, d]`` for several tables at once, each
    looked up in its flat ``[K·R, d]`` view (member k's ids shifted by k·R: one gather of K·n
    rows), its gradient an ``index_add`` of those rows in order (each row's sum in the order
    one member's ``index_add`` takes: a member's gradient does not depend on K). ``sparse``:
    the gradient holds only the rows looked up (added the same way), row-sparse."""

    @staticmethod
    def forward(ctx: Any, n: int, sparse: bool, *tensors: Tensor) -> tuple[Tensor, ...]:
        weights, ids = tensors[:n], tensors[n:]
        flat, out = [], []
        for w, i in zip(weights, ids, strict=True):
            k, r, d = w.shape
            f = (i.reshape(1, -1) + _member_shift(k, r, i.device)).reshape(-1)
            flat.append(f)
            out.append(w.reshape(k * r, d).index_select(0, f).view(k, *i.shape, d))
        ctx.save_for_backward(*flat)
        ctx.shapes, ctx.sparse = [w.shape for w in weights], sparse
        return tuple(out)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        out: list[Tensor | None] = [None, None]
        for j, (flat, (k, r, d), g) in enumerate(zip(ctx.saved_tensors, ctx.shapes, grads,
                                                     strict=True)):
            if g is None or not ctx.needs_input_grad[j + 2]:
                out.append(None)
                continue
            if ctx.sparse:
                rows, where = torch.unique(flat, sorted=True, return_inverse=True)
                values = g.new_zeros(rows.shape[0], d).index_add_(0, where, g.reshape(-1, d))
                out.append(_sparse_rows(rows, values, ctx.shapes[j]))
                continue
            gw = g.new_zeros(k * r, d).index_add_(0, flat, g.reshape(-1, d))
            out.append(gw.view(k, r, d))
        return (*out, *([None] * len(ctx.shapes)))


#: From this many members on, :class:`_MeanBags`'s gradient sorts the events once for all of
#: them (then one embedding bag); below, it adds each event's row in event order. Both sum
#: each row's terms in event order, so they give the same bits
#: (tests/transfer/packs/test_stacked.py).
_SORT_FROM = 2


class _MeanBags(torch.autograd.Function):
    """The mean of each bag of rows of every member's table ``[K, R, d]``: one
    ``F.embedding_bag`` over the flat ``[K·R, d]`` view with K·B bags (member k's ids shifted
    by k·R, its bags by k·n), each bag computed on its own. The weight's gradient is an
    embedding bag too, as :class:`gemkd.transfer.layers._MeanBags` computes it: events sorted by
    id (stably, once for every member), each row summing the gradients of the bags its events
    are in, each scaled by 1/bag size. ``sparse``: the gradient holds only the rows read (their
    sums the same), row-sparse."""

    @staticmethod
    def forward(ctx: Any, weight: Tensor, ids: Tensor, offsets: Tensor, sparse: bool = False
                ) -> Tensor:
        k, r, d = weight.shape
        n, b = ids.shape[0], offsets.shape[0] - 1
        shift = _member_shift(k, 1, ids.device)
        flat_ids = (ids.unsqueeze(0) + shift * r).reshape(-1)
        flat_offsets = torch.cat([(offsets[:-1].unsqueeze(0) + shift * n).reshape(-1),
                                  offsets.new_full((1,), k * n)])
        ctx.save_for_backward(ids, offsets)
        ctx.shape, ctx.sparse = weight.shape, sparse
        out = F.embedding_bag(flat_ids, weight.reshape(k * r, d), flat_offsets, mode="mean",
                              include_last_offset=True)
        return out.view(k, b, d)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None]:
        ids, offsets = ctx.saved_tensors
        k, r, d = ctx.shape
        n, b = ids.shape[0], offsets.shape[0] - 1
        sizes = offsets[1:] - offsets[:-1]
        scaled = grad / sizes.clamp(min=1).view(1, b, 1).to(grad.dtype)
        bag = torch.repeat_interleave(torch.arange(b, device=ids.device), sizes, output_size=n)
        if k < _SORT_FROM:  # each event's row added in event order: the same sums, no sort
            per_event = scaled.index_select(1, bag).reshape(k * n, d)
            flat_ids = (ids.unsqueeze(0) + _member_shift(k, r, ids.device)).reshape(-1)
            if ctx.sparse:
                rows, where = torch.unique(flat_ids, sorted=True, return_inverse=True)
                values = grad.new_zeros(rows.shape[0], d).index_add_(0, where, per_event)
                return _sparse_rows(rows, values, ctx.shape), None, None, None
            return grad.new_zeros(k * r, d).index_add_(0, flat_ids, per_event).view(k, r, d), \
                None, None, None
        sorted_ids, perm = torch.sort(ids, stable=True)
        shift = _member_shift(k, 1, ids.device)
        if ctx.sparse:  # one bag per row read (each member's), not per row of the table
            read, counts = torch.unique_consecutive(sorted_ids, return_counts=True)
            rows = torch.cumsum(counts, 0)
        else:
            rows = torch.cumsum(torch.bincount(sorted_ids, minlength=r), 0)
        row_offsets = torch.cat([ids.new_zeros(1), (rows.unsqueeze(0) + shift * n).reshape(-1)])
        bags = (bag.index_select(0, perm).unsqueeze(0) + shift * b).reshape(-1)
        gw = F.embedding_bag(bags, scaled.reshape(k * b, d), row_offsets, mode="sum",
                             include_last_offset=True)
        if ctx.sparse:
            flat_rows = (read.unsqueeze(0) + shift * r).reshape(-1)
            return _sparse_rows(flat_rows, gw, ctx.shape), None, None, None
        return gw.view(k, r, d), None, None, None


def lookup(ids: Tensor, weight: Tensor, sparse: bool = False) -> Tensor:
    """``[K, ..., d]``: rows ``ids [...]`` (already in range) of every member's table
    ``weight [K, R, d]`` (contiguous); ``sparse``: its gradient row-sparse."""
    return _Lookups.apply(1, sparse, weight, ids)[0]


def lookups(ids: list[Tensor], weights: list[Tensor], sparse: bool = False) -> list[Tensor]:
    """:func:`lookup` of ``ids[i]`` in ``weights[i]`` for every i, in one autograd node."""
    if not weights:
        return []
    return list(_Lookups.apply(len(weights), sparse, *weights, *ids))


def bag_mean(ids: Tensor, weight: Tensor, offsets: Tensor, sparse: bool = False) -> Tensor:
    """``[K, B, d]``: the mean of the rows ``ids [N]`` of each bag ``offsets [B+1]`` of every
    member's table ``weight [K, R, d]`` (0 for an empty bag): the stacked
    ``segment_mean(table(ids), offsets)``, without the ``[K, N, d]`` rows; ``sparse``: its
    gradient row-sparse."""
    return _MeanBags.apply(weight, ids, offsets, sparse)
