"""The built-in students' forward for a pack's K stacked members, registered by class.

Why here and not on the student: a student writes one ``forward``. A pack runs any student's
K members under ``torch.func.vmap`` over ``functional_call`` of that forward; for the built-in
students a hand-stacked forward (:mod:`gemkd.transfer.packs.stacked`'s batched matmuls and
embedding bags) is faster than vmap for a run alone (a pack of one; ``python -m
benchmarks.bench_packs --forwards``, docs/notes/2026-12-06-one-forward.md), so it lives with
the packs and is looked up by the student's class (:func:`register_stacked`,
:func:`stacked_forward`), one choice per class whatever K (the two differ in the last bits).
The students register theirs (``gemkd.students``): transfer does not import the model
packages, so the functions here read a student through the attributes :class:`StudentLayout`
names (those of ``gemkd.students.StudentBase``) and mirror its ``forward`` op for op. Each
member's slice is computed as its own, so a member's numbers do not depend on K
(``tests/transfer/packs/test_stacked.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

import torch
from torch import Tensor, nn

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.models import StudentOutput
from gemkd.transfer.ops import keep_last
from gemkd.transfer.packs import stacked

#: ``fn(student, params, batch, features)``: every member's output ``[K, B, ...]``, ``params``
#: the student's parameter names → ``[K, ...]`` tensors, ``features`` ``[B, F]`` or ``[K, B, F]``
StackedForward = Callable[[Any, Mapping[str, Tensor], Batch, Tensor | None], StudentOutput]

_REGISTRY: dict[type, StackedForward] = {}


def register_stacked(cls: type[nn.Module], forward: StackedForward) -> None:
    """Run the packs of ``cls`` (and of its subclasses that change only ``__init__``) through
    ``forward`` instead of vmap over ``cls.forward``; ``forward`` must give each member what
    its own ``forward`` gives, computed so that it does not depend on K."""
    if "forward" not in vars(cls):
        raise TypeError(f"{cls.__name__} does not define forward: a stacked forward mirrors "
                        "the forward of the class it is registered for")
    _REGISTRY[cls] = forward


def stacked_forward(student: nn.Module) -> Callable[..., StudentOutput] | None:
    """``(params, batch, features) -> StudentOutput`` for ``student``'s members when a stacked
    forward is registered for its class, else None (the pack vmaps its ``forward``). A
    subclass of a registered class counts only when it changes nothing but ``__init__``: one
    that overrides ``forward`` or a building block it calls is vmapped, not run through a
    stacked forward that would ignore the change."""
    mro = type(student).__mro__
    owner = next((c for c in mro if c in _REGISTRY), None)
    if owner is None:
        return None
    for cls in mro[:mro.index(owner)]:
        if any(callable(v) and name != "__init__" for name, v in vars(cls).items()):
            return None
    return functools.partial(_REGISTRY[owner], student)


class StudentLayout(Protocol):
    """What a stacked forward here reads of a student (``gemkd.students.StudentBase``'s
    attributes): the chosen features and their columns, the tables, the history's fields and
    truncation, the domain table, the dense width, the representation path and the head."""

    features: list[str]
    cat_cols: list[int]
    cat_index: Tensor
    sequence: list[str]
    shared: dict[str, str]
    embedding_dim: int
    max_seq_len: int
    n_dense: int
    repr_dim: int
    tables: nn.ModuleDict
    seq_tables: nn.ModuleDict
    domain_table: nn.Embedding | None
    repr_norm: nn.LayerNorm | None
    repr_proj: nn.Linear | None
    head: nn.Linear | None

    def check_batch(self, batch: Batch) -> None: ...
    def dense_input(self, batch: Batch) -> Tensor: ...


# ---- the built-ins' forwards ---------------------------------------------------------------
def mlp_student(s: Any, p: Mapping[str, Tensor], batch: Batch,
                features: Tensor | None = None) -> StudentOutput:
    """``MLPStudent.forward`` for every member."""
    x = add_repr(s, p, flat_input(s, p, batch), features)
    return output(s, p, stacked.mlp(p, "mlp", x, len(s.hidden)))


def dcn_student(s: Any, p: Mapping[str, Tensor], batch: Batch,
                features: Tensor | None = None) -> StudentOutput:
    """``DCNStudent.forward`` for every member: cross layers beside the deep MLP."""
    x0 = add_repr(s, p, flat_input(s, p, batch), features)
    x = x0
    for i in range(len(s.cross)):
        x = x0 * stacked.linear(x, p[f"cross.{i}.linear.weight"],
                                p[f"cross.{i}.linear.bias"]) + x
    deep = stacked.mlp(p, "deep", x0, len(s.hidden))
    return output(s, p, torch.cat([x, deep], dim=2))


def seq_pool_student(s: Any, p: Mapping[str, Tensor], batch: Batch,
                     features: Tensor | None = None) -> StudentOutput:
    """``SeqPoolStudent.forward`` for every member: the history pooled by target attention on
    the query feature, beside the flat input."""
    s.check_batch(batch)
    events, offsets = history(s, p, batch)
    q = stacked.linear(embed_feature(s, p, batch, s.query_feature), p["query.weight"],
                       p["query.bias"])
    attended = stacked.target_attention(q, events, offsets)
    x = torch.cat([flat_input(s, p, batch, (events, offsets)), attended], dim=2)
    x = add_repr(s, p, x, features)
    return output(s, p, stacked.mlp(p, "mlp", x, len(s.hidden)))


# ---- StudentBase's building blocks for every member ----------------------------------------
def _lookup(p: Mapping[str, Tensor], key: str, table: nn.Embedding, ids: Tensor) -> Tensor:
    """``[K, ..., d]``: the hashed rows ``ids`` of every member's copy of ``table``."""
    return stacked.lookup(torch.remainder(ids, table.num_embeddings), p[f"{key}.weight"],
                          table.sparse)


def _seq_table(s: StudentLayout, name: str) -> tuple[str, nn.Embedding]:
    """The parameter prefix and table of sequence field ``name`` (a shared one's feature
    table)."""
    if name in s.shared:
        return f"tables.{s.shared[name]}", cast(nn.Embedding, s.tables[s.shared[name]])
    return f"seq_tables.{name}", cast(nn.Embedding, s.seq_tables[name])


def embed_feature(s: StudentLayout, p: Mapping[str, Tensor], batch: Batch,
                  name: str) -> Tensor:
    """``[K, B, d]``: ``embed_feature`` for every member."""
    col = batch.categorical[:, s.cat_cols[s.features.index(name)]]
    return _lookup(p, f"tables.{name}", cast(nn.Embedding, s.tables[name]), col)


def history(s: StudentLayout, p: Mapping[str, Tensor], batch: Batch) -> tuple[Tensor, Tensor]:
    """``(events [K, N', d], offsets [B+1])``: ``history`` for every member."""
    if not s.sequence:  # no events, all-zero offsets (the batch's may count other fields)
        b, k = batch.categorical.shape[0], next(iter(p.values())).shape[0]
        events = batch.dense.new_zeros(k, 0, s.embedding_dim)
        return events, torch.zeros(b + 1, dtype=torch.long, device=batch.categorical.device)
    index, offsets, _ = keep_last(batch.seq_offsets, s.max_seq_len, batch.seq_max_len)
    total: Tensor | None = None
    for name in s.sequence:
        ids = batch.seq_values[name]
        if index is not None:
            ids = ids.index_select(0, index)
        rows = _lookup(p, *_seq_table(s, name), ids)
        total = rows if total is None else total + rows
    assert total is not None
    return total, offsets


def _embeddings(s: StudentLayout, p: Mapping[str, Tensor], batch: Batch,
                pool_history: bool) -> tuple[list[Tensor], Tensor | None]:
    """Every chosen feature's rows ``[K, B, d]`` (in ``s.tables`` order) and, with
    ``pool_history``, the mean-pooled history ``[K, B, d]``. A table's uses go through one
    embedding bag (a feature's id a bag of one beside the history's bags of a field that
    shares the table), so its gradient is one tensor, written once: the tables are most of
    the step's memory traffic at K members."""
    b = batch.categorical.shape[0]
    hist: dict[str, Tensor] = {}
    offsets = batch.seq_offsets
    if pool_history and s.sequence:
        index, offsets, _ = keep_last(batch.seq_offsets, s.max_seq_len, batch.seq_max_len)
        for name in s.sequence:
            ids = batch.seq_values[name]
            hist[name] = ids if index is None else ids.index_select(0, index)
    pooled: dict[str, Tensor] = {}
    rows: dict[str, Tensor] = {}
    single: dict[str, Tensor] = {}  # looked up together, in one autograd node
    cols = batch.categorical.index_select(1, s.cat_index) if s.features else None
    for j, name in enumerate(s.tables):
        assert cols is not None
        table = cast(nn.Embedding, s.tables[name])
        ids = torch.remainder(cols[:, j], table.num_embeddings)
        fields = [f for f in hist if s.shared.get(f) == name]
        if not fields:
            single[name] = ids
            continue
        bag_ids, bag_offsets, start = [ids], [torch.arange(b + 1, device=ids.device)], b
        for f in fields:
            bag_ids.append(torch.remainder(hist[f], table.num_embeddings))
            bag_offsets.append(offsets[1:] + start)
            start += hist[f].shape[0]
        out = stacked.bag_mean(torch.cat(bag_ids), p[f"tables.{name}.weight"],
                               torch.cat(bag_offsets), table.sparse)
        rows[name] = out[:, :b]
        for i, f in enumerate(fields):
            pooled[f] = out[:, b * (i + 1):b * (i + 2)]
    found = stacked.lookups(list(single.values()), [p[f"tables.{name}.weight"] for name in single],
                            any(cast(nn.Embedding, s.tables[n]).sparse for n in single))
    rows.update(zip(single, found, strict=True))
    for f in hist:
        if f not in pooled:
            key, table = _seq_table(s, f)
            pooled[f] = stacked.bag_mean(torch.remainder(hist[f], table.num_embeddings),
                                         p[f"{key}.weight"], offsets, table.sparse)
    total: Tensor | None = None
    for f in s.sequence if pool_history else []:
        total = pooled[f] if total is None else total + pooled[f]
    return [rows[name] for name in s.tables], total


def flat_input(s: StudentLayout, p: Mapping[str, Tensor], batch: Batch,
               hist: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """``[K, B, input_dim]``: ``flat_input`` for every member (``hist``: the history if
    already computed)."""
    s.check_batch(batch)
    k = next(iter(p.values())).shape[0]
    b = batch.categorical.shape[0]
    parts = []
    rows, pooled = _embeddings(s, p, batch, pool_history=hist is None)
    if rows:
        parts.append(torch.cat(rows, dim=2))
    if s.domain_table is not None:
        parts.append(_lookup(p, "domain_table", s.domain_table, batch.domain))
    if s.sequence:
        if hist is not None:
            pooled = stacked.segment_mean(*hist)
        assert pooled is not None
        parts.append(pooled)
    if s.n_dense:
        dense = s.dense_input(batch)  # no parameters: every member's
        parts.append(dense.unsqueeze(0).expand(k, *dense.shape))
    if not parts:
        return batch.dense.new_zeros(k, b, 0)
    return torch.cat(parts, dim=2)


def add_repr(s: StudentLayout, p: Mapping[str, Tensor], x: Tensor,
             features: Tensor | None) -> Tensor:
    """``add_repr`` for every member (``features`` ``[B, F]`` or ``[K, B, F]``)."""
    if features is None:
        return x
    name = type(s).__name__
    if s.repr_proj is None or s.repr_norm is None:
        raise ValueError(f"{name}: representation features given but repr_dim is 0 "
                         "(set init_args.repr_dim to their width)")
    if features.shape[-1] != s.repr_dim or features.shape[-2] != x.shape[1]:
        raise ValueError(f"{name}: representation features have shape "
                         f"{tuple(features.shape)}, expected [..., {x.shape[1]}, {s.repr_dim}]")
    normed = stacked.layer_norm(features.to(x.dtype), p["repr_norm.weight"], p["repr_norm.bias"],
                                s.repr_norm.eps)
    return x + stacked.linear(normed, p["repr_proj.weight"], p["repr_proj.bias"])


def output(s: StudentLayout, p: Mapping[str, Tensor], embedding: Tensor) -> StudentOutput:
    """``output`` for every member: logits ``[K, B, n_tasks]``."""
    if s.head is None:
        raise RuntimeError(f"{type(s).__name__}: call init_head() in __init__")
    return StudentOutput(logits=stacked.linear(embedding, p["head.weight"], p["head.bias"]),
                         embedding=embedding)
