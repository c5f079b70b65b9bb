"""Row-wise updates of embedding tables: only the rows a batch looked up change (DESIGN §3).

Why: a dense AdamW step reads and writes every row of every table, every step (the weights, two
moments and the gradient: seven passes), though a batch of 512 looks up a few hundred of a
table's rows. That traffic was 47-77 % of a teacher step's GPU time and the floor of the student
packs (84 % of a member's weights are one table). Production recommenders update tables
row-wise over sparse gradients (TorchRec's fused optimisers over FBGEMM's table-batched
embeddings; ``fbgemm-gpu-cpu`` 1.9.0 does not load against torch 2.13: undefined symbols). So
the tables here give row-sparse gradients (``nn.Embedding(sparse=True)``, the layers' bags
likewise) and the table group of the optimiser takes one of two row-wise rules:

* ``rowwise_adagrad``: FBGEMM's ``EXACT_ROWWISE_ADAGRAD``, one accumulator per row,
  ``G_r += mean(g_r²)``, ``w_r -= lr · g_r / (sqrt(G_r) + eps)`` (weight decay as L2 on the
  gradient, FBGEMM's ``L2`` mode);
* ``sparse_adam``: lazy Adam, ``torch.optim.SparseAdam``'s rule (the moments and weights of the
  touched rows only, bias correction by the table's step count) with AdamW's decoupled decay on
  those rows;

``dense_adamw`` keeps today's dense AdamW (the reference). Written here rather than
``torch.optim.SparseAdam``/``Adagrad`` because one Lightning optimiser must also carry the dense
groups (AdamW), and a pack updates K members' tables at each member's own lr in one call.

A table's gradient may also arrive dense (a table read as ``weight[...]``, or summed with a dense
use): every row then counts as touched. Rows are those of ``weight.view(-1, d)`` (a pack's
stacked ``[K, R, d]`` tables: member k's row r is row ``k·R + r``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from gemkd.transfer.layers import HashedEmbedding
from gemkd.transfer.options import TABLE_OPTIMIZERS

#: the rules that update rows (not ``dense_adamw``)
ROW_RULES = ("rowwise_adagrad", "sparse_adam")


def check_table_optimizer(value: str) -> str:
    """``value`` if it names a table optimiser, else ``ValueError`` naming the choices."""
    if value not in TABLE_OPTIMIZERS:
        raise ValueError(f"table_optimizer must be one of {', '.join(TABLE_OPTIMIZERS)}, got "
                         f"{value!r}")
    return value


#: A table with fewer rows is updated densely under every rule: a batch reads most of its rows,
#: and the row-wise bookkeeping (the touched rows' sort, gathers and scatters) costs more than
#: the rows it skips. Measured on a pack of 16 quickstart students (mlp, batch 256, 20-event
#: histories) on the small world: its 7 tables of 3-200 rows row-wise made the step 2x slower;
#: only the 5,300-row ad table can gain (docs/notes/2026-12-04-row-wise-tables.md).
ROW_WISE_MIN_ROWS = 1024


def id_tables(model: nn.Module, min_rows: int = ROW_WISE_MIN_ROWS) -> list[HashedEmbedding]:
    """The ID tables of ``model`` with at least ``min_rows`` rows (its
    :class:`~gemkd.transfer.layers.HashedEmbedding` tables, each once): what a row-wise rule
    updates. Smaller tables and other ``nn.Embedding`` modules (a head's per-domain bias, a
    position's slot, read whole) stay with the dense weights."""
    out: dict[int, HashedEmbedding] = {}
    for m in model.modules():
        if isinstance(m, HashedEmbedding) and m.num_embeddings >= min_rows:
            out.setdefault(id(m), m)
    return list(out.values())


def set_sparse_tables(model: nn.Module, sparse: bool, min_rows: int = ROW_WISE_MIN_ROWS
                      ) -> None:
    """The ID tables of ``model`` that :func:`id_tables` picks give row-sparse gradients,
    lookups and bags alike (``sparse``), or dense ones; every other table dense ones."""
    chosen = {id(m) for m in id_tables(model, min_rows)}
    for m in id_tables(model, 0):
        m.sparse = sparse and id(m) in chosen


def touched_rows(grad: Tensor) -> tuple[Tensor, Tensor]:
    """``(rows [U], values [U, d])``: the rows of ``grad`` (viewed ``[-1, d]``) a step touches,
    ascending and each once, with their summed gradients. A sparse gradient (over the leading
    dimensions, dense over the last) is coalesced unless its rows already ascend (the layers'
    backward writes them so, but autograd's accumulation drops the coalesced flag: a sort
    saved); a dense one touches every row."""
    d = grad.shape[-1]
    if not grad.is_sparse:
        flat = grad.reshape(-1, d)
        return torch.arange(flat.shape[0], device=grad.device), flat
    rows = _flat_rows(grad._indices(), grad.shape)
    if grad.is_coalesced() or bool((rows[1:] > rows[:-1]).all()):
        return rows, grad._values().reshape(-1, d)
    g = grad.coalesce()
    return _flat_rows(g._indices(), grad.shape), g._values().reshape(-1, d)


def _flat_rows(index: Tensor, shape: torch.Size) -> Tensor:
    """Rows of the ``[-1, d]`` view from a sparse gradient's indices (a stacked ``[K, R, d]``:
    member k's row r is ``k·R + r``)."""
    rows = index[0]
    for dim in range(1, index.shape[0]):
        rows = rows * shape[dim] + index[dim]
    return rows


def rowwise_adagrad_(weight: Tensor, rows: Tensor, grad: Tensor, state_sum: Tensor,
                     lr: float | Tensor, eps: float, weight_decay: float | Tensor = 0.0) -> None:
    """Row-wise Adagrad on ``rows`` of ``weight`` (viewed ``[-1, d]``), in place.

    Parameters
    ----------
    weight: the table, ``[..., d]`` (contiguous).
    rows, grad: :func:`touched_rows`' output.
    state_sum: ``[N]``, each row's accumulated mean squared gradient.
    lr, weight_decay: floats, or ``[U, 1]`` per row (a pack's members).
    eps: added to the root of the accumulator.
    """
    w = weight.view(-1, weight.shape[-1])
    w_rows = w.index_select(0, rows)
    g = grad if _is_zero(weight_decay) else grad + w_rows * weight_decay
    acc = state_sum.index_select(0, rows) + _row_mean_sq(g)
    state_sum.index_copy_(0, rows, acc)
    w.index_copy_(0, rows, w_rows - g * lr / (acc.sqrt() + eps).unsqueeze(1))


def lazy_adam_(weight: Tensor, rows: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor,
               step: int, lr: float | Tensor, betas: tuple[float, float], eps: float,
               weight_decay: float | Tensor = 0.0) -> None:
    """Lazy Adam on ``rows`` of ``weight``, in place: ``torch.optim.SparseAdam``'s update of the
    touched rows' moments and weights (bias corrections at the table's ``step``, counted from 1),
    after AdamW's decoupled decay ``w_r *= 1 - lr · weight_decay`` of those rows.

    Parameters
    ----------
    weight, exp_avg, exp_avg_sq: the table and its moments, ``[..., d]`` (contiguous).
    rows, grad: :func:`touched_rows`' output.
    lr, weight_decay: floats, or ``[U, 1]`` per row (a pack's members).
    """
    d = weight.shape[-1]
    w, m, v = weight.view(-1, d), exp_avg.view(-1, d), exp_avg_sq.view(-1, d)
    beta1, beta2 = betas
    w_rows = w.index_select(0, rows)
    if not _is_zero(weight_decay):
        w_rows = w_rows * (1 - lr * weight_decay)
    # plain binary ops only (no lerp, addcmul or alpha: their vectorised forms fuse a multiply
    # and an add where the scalar tail does not), so a row's bits do not depend on its place
    m_rows = m.index_select(0, rows) * beta1 + grad * (1 - beta1)
    v_rows = v.index_select(0, rows) * beta2 + grad * grad * (1 - beta2)
    m.index_copy_(0, rows, m_rows)
    v.index_copy_(0, rows, v_rows)
    bc1 = 1 - beta1 ** step
    bc2_sqrt = (1 - beta2 ** step) ** 0.5
    denom = v_rows.sqrt() / bc2_sqrt + eps
    w.index_copy_(0, rows, w_rows - m_rows / denom * (lr / bc1))


def _is_zero(x: float | Tensor) -> bool:
    return not isinstance(x, Tensor) and x == 0


def _row_mean_sq(g: Tensor) -> Tensor:
    """``[U]``: each row's mean square, its columns added left to right (the same sum for a row
    however many rows there are: a pack's member equals its run alone)."""
    sq = g * g
    total = sq[:, 0].clone()
    for j in range(1, sq.shape[1]):
        total += sq[:, j]
    return total / sq.shape[1]


def table_step(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> None:
    """One row-wise step of a table ``group`` (its ``table_rule`` one of :data:`ROW_RULES`),
    each parameter's state in ``optimizer.state``. Each of ``optimizer.row_hooks`` (if any) is
    called ``hook(param, rows)`` just before the rows change: the gradient exists there on
    every path (Lightning's automatic optimisation computes it inside ``step``), the weights
    are the step's old ones (what a lazy average brings up to date)."""
    rule = group["table_rule"]
    for p in group["params"]:
        if p.grad is None:
            continue
        rows, g = touched_rows(p.grad)
        for hook in getattr(optimizer, "row_hooks", ()):
            hook(p, rows)
        state = optimizer.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            if rule == "rowwise_adagrad":
                state["sum"] = p.new_zeros(p.numel() // p.shape[-1])
            else:
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
        state["step"] += 1
        with torch.no_grad():
            if rule == "rowwise_adagrad":
                rowwise_adagrad_(p.data, rows, g, state["sum"], group["lr"], group["eps"],
                                 group["weight_decay"])
            else:
                lazy_adam_(p.data, rows, g, state["exp_avg"], state["exp_avg_sq"],
                           int(state["step"]), group["lr"], group["betas"], group["eps"],
                           group["weight_decay"])


def grads_to_clip(params: Iterable[Tensor]) -> list[Tensor]:
    """The tensors a norm clip scales, one per parameter with a gradient: a row-sparse one
    coalesced first (a row looked up twice counts once, with its summed gradient), its values."""
    out = []
    for p in params:
        if p.grad is None:
            continue
        if p.grad.is_sparse and not p.grad.is_coalesced():
            p.grad = p.grad.coalesce()
        out.append(p.grad.values() if p.grad.is_sparse else p.grad)
    return out


def clip_tensors_(tensors: list[Tensor], max_norm: float, norm_type: float = 2.0) -> Tensor:
    """Scale every tensor by ``min(1, max_norm / (total + 1e-6))`` as torch's
    ``clip_grad_norm_`` does, ``total`` the ``norm_type``-norm of their norms; returns it."""
    if not tensors:
        return torch.tensor(0.0)
    norms = [torch.linalg.vector_norm(t, norm_type) for t in tensors]
    total = torch.linalg.vector_norm(torch.stack(norms), norm_type)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for t in tensors:
        t.mul_(coef.to(t.dtype))
    return total


def clip_grad_norm_(params: Iterable[Tensor], max_norm: float) -> Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (L2) for gradients of which some are row-sparse (which
    torch's refuses): :func:`grads_to_clip`, then :func:`clip_tensors_`. Returns the total
    norm."""
    params = [p for p in params if p.grad is not None]
    if not any(p.grad is not None and p.grad.is_sparse for p in params):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    return clip_tensors_(grads_to_clip(params), max_norm)
