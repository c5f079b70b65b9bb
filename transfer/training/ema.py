"""An exponential moving average of the weights for one streaming pass.

Lightning's ``EMAWeightAveraging`` starts its average at the first step's weights and forgets
them with a fixed decay: on a short stream (a student's few hundred steps) a fifth of the final
average can still be near-initial weights. This uses the warm-up rule of TensorFlow's
``ExponentialMovingAverage`` (``num_updates``): the decay at update ``n`` is
``min(decay, (1 + n) / (10 + n))``, so early weights are forgotten fast and the configured decay
holds once the stream is long enough. Everything else is Lightning's ``WeightAveraging`` (the
averaged copy is swapped in at the end of fit, so test/predict use it).

The update is multi-tensor (``AveragedModel(multi_avg_fn=...)``, which ``WeightAveraging``
forwards): three ``torch._foreach_*`` calls per dtype group instead of ~10 eager ops per tensor
(the per-tensor ``avg_fn`` cost a small student ~150 ops, a fifth of its step). It computes
exactly the per-tensor maths of :func:`warmup_ema_fn` (same ops, same order, same dtypes), so
the averages are bit-identical to it; ``torch._foreach_lerp_`` would be one call fewer but
rounds differently (it switches formula at weight 0.5).
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import WeightAveraging
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import Tensor

from gemkd.transfer.training.lazy_ema import LazyRowAverage
from gemkd.transfer.training.table_optim import ROW_RULES


def _check(decay: float) -> None:
    if not 0.0 < decay < 1.0:
        raise ValueError(f"ema decay must be in (0, 1), got {decay}")


def _weight(decay: float, num_averaged: Tensor, like: Tensor) -> Tensor:
    """``1 - min(decay, (1 + n) / (10 + n))`` in ``like``'s dtype: the new weights' share."""
    n = torch.as_tensor(num_averaged, dtype=like.dtype, device=like.device)
    return 1 - torch.clamp((1 + n) / (10 + n), max=decay)


@functools.lru_cache(maxsize=1 << 14)
def _host_weight(decay: float, n: int, dtype: torch.dtype) -> float:
    """:func:`_weight` for a tensor of ``dtype`` computed on the host, as a Python float: numpy
    float32/float64 scalars round exactly as torch's float32/float64 ops (integer tensors compute
    the weight in float32, as torch's true division does); other dtypes ask torch, on the CPU.
    Kept per ``(decay, n, dtype)``: the numpy scalars cost ~10 us a step, and every run of a
    process (a sweep's students) asks for the same first updates."""
    exact: dict[torch.dtype, type[np.floating]] = {torch.float32: np.float32,
                                                   torch.float64: np.float64}
    np_t = exact.get(dtype)
    if np_t is None and not (dtype.is_floating_point or dtype.is_complex):
        np_t = np.float32
    if np_t is None:
        return _weight(decay, torch.tensor(n), torch.empty((), dtype=dtype)).item()
    return float(np_t(1) - min(np_t(1 + n) / np_t(10 + n), np_t(decay)))


def warmup_ema_fn(decay: float) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """Per-tensor ``avg_fn`` for ``AveragedModel`` with the warm-up rule: the reference maths
    (:func:`warmup_ema_multi_fn` is what :class:`StreamEMA` runs)."""
    _check(decay)

    @torch.no_grad()
    def update(avg: Tensor, current: Tensor, num_averaged: Tensor) -> Tensor:
        return avg + (current - avg) * _weight(decay, num_averaged, avg)

    return update


def _foreach_ema(avg: list[Tensor], current: list[Tensor], w: Tensor | float) -> None:
    """``avg ← avg + (current - avg) · w`` for one dtype group, in place. Integer tensors (a
    student's column index) take the formula out of place and are copied back, truncated, as the
    per-tensor ``avg_fn``'s ``copy_`` did."""
    diff = torch._foreach_sub(current, avg)
    if avg[0].is_floating_point() or avg[0].is_complex():
        torch._foreach_mul_(diff, w)
        torch._foreach_add_(avg, diff)
    else:
        torch._foreach_copy_(avg, torch._foreach_add(torch._foreach_mul(diff, w), avg))


def warmup_ema_multi_fn(decay: float) -> Callable[[list[Tensor], list[Tensor], Tensor], None]:
    """``multi_avg_fn`` for ``AveragedModel``: :func:`warmup_ema_fn` on a list of tensors of one
    device and dtype (``AveragedModel`` groups them), in place."""
    _check(decay)

    @torch.no_grad()
    def update(avg: list[Tensor], current: list[Tensor], num_averaged: Tensor) -> None:
        if avg:
            _foreach_ema(avg, current, _weight(decay, num_averaged, avg[0]))

    return update


def _float32_exact(avg: list[Tensor]) -> bool:
    """Whether ``avg`` is an integer group whose values float32 holds exactly (|x| <= 2^24).
    Such a group, once equal to the module's tensors (an index buffer that never changes), is a
    fixed point of the update: :func:`_foreach_ema` adds ``0 · w`` in float32 and truncates back,
    giving each value itself, so the step can skip its four ops."""
    return not (avg[0].is_floating_point() or avg[0].is_complex()) and all(
        bool((a.abs() <= 1 << 24).all()) for a in avg)


def _flat_group(avg: list[Tensor], cur: list[Tensor]) -> tuple[Tensor, list[Tensor], Tensor]:
    """``(buffer, current, scratch)`` for one floating dtype group: the averaged tensors ``avg``
    (parameters and buffers of the averaged module) copied into one buffer and re-pointed at
    their slices of it (``.data``, as Lightning's own swaps write them); 1-D views of the
    module's contiguous ``cur`` tensors, in the same order; a scratch buffer of the same size."""
    flat = torch.cat([a.detach().reshape(-1) for a in avg])
    offset = 0
    for a in avg:
        a.data = flat[offset:offset + a.numel()].view(a.shape)
        offset += a.numel()
    return flat, [c.view(-1) for c in cur], torch.empty_like(flat)


class StreamEMA(WeightAveraging):
    """EMA of the weights, updated after every optimizer step, with the warm-up rule above.

    The step's update bypasses ``AveragedModel.update_parameters``, whose own per-call Python
    (walking both modules' parameters and buffers, ``detach``/``to`` per tensor, grouping, two
    host checks of ``n_averaged``: ~50 ops) cost twice the averaging itself. The pairs of
    (averaged, current) tensors are collected once per fit, grouped by dtype, and each update is
    :func:`_foreach_ema` with the weight computed on the host from a mirrored count; the result
    is what ``update_parameters(multi_avg_fn=warmup_ema_multi_fn(decay))`` computes, and
    ``n_averaged`` (checkpoints) is kept. An average held on another device or in another dtype
    than the module falls back to ``update_parameters``. Swapping, checkpointing and the end-of-fit
    copy are Lightning's.

    A floating-point group's averaged tensors are moved, once per fit, into one flat buffer (each
    a view of its slice, so the averaged module, its checkpoint and the copies stay as they
    were), and its update is four single-tensor ops on that buffer (gather the current weights,
    then :func:`_foreach_ema`'s subtract, scale and add) instead of three ``_foreach`` calls,
    which on the CPU loop over the tensors one kernel each (a small student's ~15 tensors:
    ~55 us a step, against ~30 us). Element by element it is the same arithmetic, so the same
    bits. An integer group equal to the module's (a student's constant column index) is left as
    it is, which is what the update would compute (:func:`_float32_exact`).

    A table the optimiser updates row-wise (a group with a ``table_rule`` of
    :data:`~gemkd.transfer.training.table_optim.ROW_RULES`) is averaged lazily
    (:class:`~gemkd.transfer.training.lazy_ema.LazyRowAverage`): the rows its gradient touched,
    brought up to date just before the optimiser changes them (its ``row_hooks``) and updated
    after the step;
    every row at a flush before Lightning reads the average (validation swap, checkpoint, end
    of fit). The dense average's values, up to rounding, at the touched rows' cost."""

    def __init__(self, decay: float) -> None:
        super().__init__(multi_avg_fn=warmup_ema_multi_fn(decay), use_buffers=True)
        self.decay = decay
        self._groups: list[tuple[list[Tensor], list[Tensor]]] | None = None
        self._flat: list[tuple[Tensor, list[Tensor], Tensor]] = []
        self._exact: list[bool] = []
        self._n = 0
        #: row-wise tables: (the module's weight, its lazy average, the rows of this step)
        self._lazy: dict[int, tuple[Tensor, LazyRowAverage]] = {}  # id(weight) ->
        self._rows: dict[int, Tensor] = {}  # id(weight) -> this step's rows
        self._hooked: Any = None  # the optimiser whose row_hooks hold ours

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        return step_idx is not None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Lightning warns on every fit of a module that overrides ``configure_model`` (gemkd's
        modules do, to shard under fsdp) that the average cannot be sharded. The average here
        refuses sharded training outright, and ``configure_model`` of an unsharded module only
        builds what the average must copy; so that warning can never apply and is not shown."""
        if stage == "fit" and isinstance(trainer.strategy, ModelParallelStrategy):
            raise ValueError("StreamEMA keeps a whole copy of the weights; it does not run under "
                             "the fsdp (ModelParallel) strategy")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"You're using the WeightAveraging callback "
                                    r"with a model that overrides the configure_model")
            super().setup(trainer, pl_module, stage)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Pair the tensors once per fit (after a checkpoint's state is restored)."""
        avg_model = self._average_model
        assert avg_model is not None
        pairs = list(zip(itertools.chain(avg_model.module.parameters(), avg_model.module.buffers()),
                         itertools.chain(pl_module.parameters(), pl_module.buffers()),
                         strict=False))  # as AveragedModel.update_parameters pairs them
        self._groups, self._flat, self._lazy = None, [], {}
        self._remove_hook()
        if any(a.device != c.device or a.dtype != c.dtype for a, c in pairs):
            return
        self._n = int(avg_model.n_averaged)
        row_wise = {id(p) for opt in trainer.optimizers for g in opt.param_groups
                    if g.get("table_rule") in ROW_RULES for p in g["params"]}
        if row_wise:
            self._lazy = {id(c): (c, LazyRowAverage(a.detach(), c, done=self._n))
                          for a, c in pairs if id(c) in row_wise}
            pairs = [(a, c) for a, c in pairs if id(c) not in row_wise]
            self._rows = {}
            self._hooked = trainer.optimizers[0]
            self._hooked.row_hooks.append(self._before_rows)
        groups: dict[torch.dtype, tuple[list[Tensor], list[Tensor]]] = {}
        for a, c in pairs:
            group = groups.setdefault(a.dtype, ([], []))
            group[0].append(a)
            group[1].append(c.detach())
        self._groups = []
        for dtype, (avg, cur) in groups.items():
            if dtype.is_floating_point and all(c.is_contiguous() for c in cur):
                self._flat.append(_flat_group(avg, cur))
            else:
                self._groups.append(([a.detach() for a in avg], cur))
        self._exact = [False] * len(self._groups)

    def _remove_hook(self) -> None:
        if self._hooked is not None:
            self._hooked.row_hooks.remove(self._before_rows)
            self._hooked = None

    def _before_rows(self, weight: Tensor, rows: Tensor) -> None:
        """The optimiser's row hook: a row-wise table's touched rows brought up to date
        before it changes them."""
        entry = self._lazy.get(id(weight))
        if entry is not None:
            with torch.no_grad():
                entry[1].catch_up(rows)
            self._rows[id(weight)] = rows

    def _flush(self) -> None:
        """Every row-wise table's average up to date (before Lightning reads the average)."""
        with torch.no_grad():
            for _, lazy in self._lazy.values():
                lazy.flush()

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule
                                  ) -> None:
        self._flush()
        super().on_validation_epoch_start(trainer, pl_module)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        self._flush()
        super().on_save_checkpoint(trainer, pl_module, checkpoint)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._flush()
        self._remove_hook()
        super().on_train_end(trainer, pl_module)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._groups is None:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        step = trainer.global_step
        if step <= self._latest_update_step or not self.should_update(step_idx=step - 1):
            return
        with torch.no_grad():
            for flat, cur, diff in self._flat:
                torch.cat(cur, out=diff)  # the current weights, flat
                if self._n == 0:  # the first update copies, as AveragedModel's does
                    flat.copy_(diff)
                else:  # _foreach_ema's ops, in its order: (current - avg) · w, added to avg
                    diff.sub_(flat).mul_(_host_weight(self.decay, self._n, flat.dtype))
                    flat.add_(diff)
            for i, (avg, cur) in enumerate(self._groups):
                if self._n == 0:
                    torch._foreach_copy_(avg, cur)
                elif self._exact[i] and all(map(torch.equal, avg, cur)):
                    continue  # the rule's fixed point (see _float32_exact): nothing to update
                else:
                    _foreach_ema(avg, cur, _host_weight(self.decay, self._n, avg[0].dtype))
                self._exact[i] = _float32_exact(avg)
            for key, (weight, lazy) in self._lazy.items():
                rows = self._rows.pop(key, None)
                if rows is None:  # no gradient this step: no row changed
                    rows = torch.empty(0, dtype=torch.long, device=weight.device)
                lazy.update(rows, [_host_weight(self.decay, self._n, weight.dtype)])
        avg_model = self._average_model
        assert avg_model is not None  # WeightAveraging.setup made it
        avg_model.n_averaged.add_(1)  # in place: `+=` re-registers the buffer
        self._n += 1
        self._latest_update_step = step
