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


def _check(decay: float) -> None:
    if not 0.0 < decay < 1.0:
        raise ValueError(f"ema decay must be in (0, 1), got {decay}")


def _weight(decay: float, num_averaged: Tensor, like: Tensor) -> Tensor:
    """``1 - min(decay, (1 + n) / (10 + n))`` in ``like``'s dtype: the new weights' share."""
    n = torch.as_tensor(num_averaged, dtype=like.dtype, device=like.device)
    return 1 - torch.clamp((1 + n) / (10 + n), max=decay)


def _host_weight(decay: float, n: int, dtype: torch.dtype) -> float:
    """:func:`_weight` for a tensor of ``dtype`` computed on the host, as a Python float: numpy
    float32/float64 scalars round exactly as torch's float32/float64 ops (integer tensors compute
    the weight in float32, as torch's true division does); other dtypes ask torch, on the CPU."""
    np_t = {torch.float32: np.float32, torch.float64: np.float64}.get(dtype)
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
    copy are Lightning's."""

    def __init__(self, decay: float) -> None:
        super().__init__(multi_avg_fn=warmup_ema_multi_fn(decay), use_buffers=True)
        self.decay = decay
        self._groups: list[tuple[list[Tensor], list[Tensor]]] | None = None
        self._n = 0

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
        self._groups = None
        if any(a.device != c.device or a.dtype != c.dtype for a, c in pairs):
            return
        groups: dict[torch.dtype, tuple[list[Tensor], list[Tensor]]] = {}
        for a, c in pairs:
            group = groups.setdefault(a.dtype, ([], []))
            group[0].append(a.detach())
            group[1].append(c.detach())
        self._groups = list(groups.values())
        self._n = int(avg_model.n_averaged)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._groups is None:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        step = trainer.global_step
        if step <= self._latest_update_step or not self.should_update(step_idx=step - 1):
            return
        with torch.no_grad():
            for avg, cur in self._groups:
                if self._n == 0:  # the first update copies, as AveragedModel's does
                    torch._foreach_copy_(avg, cur)
                else:
                    _foreach_ema(avg, cur, _host_weight(self.decay, self._n, avg[0].dtype))
        self._average_model.n_averaged.add_(1)  # in place: `+=` re-registers the buffer
        self._n += 1
        self._latest_update_step = step
