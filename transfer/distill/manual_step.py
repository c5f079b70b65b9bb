"""The student's backward and optimiser step, without Lightning's wrappers where they are inert.

``manual_backward`` and ``LightningOptimizer.step`` exist for the precision plugin (AMP's loss
scaling and unscaling), the strategy (DDP's gradient sync, FSDP) and three hooks
(``on_before_backward``, ``on_after_backward``, ``on_before_optimizer_step``) on every callback
and on the module. On one device at full precision with none of those hooks overridden they do
nothing but dispatch empty hooks, ~6 of Lightning's hook calls a step (each sets
``_current_fx_name`` on the module twice and opens a profiler context per callback): a tenth of
a small CPU student's step. There the step is ``loss.backward()`` and the raw optimiser's
``step()``, exactly what the wrappers end up calling (``Precision.backward`` calls
``LightningModule.backward``, which calls ``loss.backward()``; ``Precision.optimizer_step`` calls
``optimizer.step`` with a closure that only runs those hooks; ``SingleDeviceStrategy`` has no
``pre_backward``/``post_backward``; gradient clipping is refused under manual optimisation).

Anywhere else — another strategy, any other precision plugin (16/bf16 mixed or true, 64-true,
transformer-engine, ...), a Fabric-run module, an overridden hook or ``backward`` — the Lightning
path runs unchanged. Lightning's own count of optimiser steps (``trainer.global_step``, which the
weight average and the loss curve read) is kept through the ``_on_before_step`` /
``_on_after_step`` callables its manual-optimisation loop installs on the optimiser; the first
step checks that the count moved, so a Lightning that counts elsewhere fails loudly, not silently.
"""

from __future__ import annotations

import weakref

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")


def wrappers_inert(module: pl.LightningModule) -> bool:
    """Whether Lightning's backward and step wrappers do nothing but call ``loss.backward()``
    and ``optimizer.step()`` for ``module`` under its current trainer (see the module doc)."""
    trainer = module.trainer
    if getattr(module, "_fabric", None) is not None:
        return False
    if type(trainer.strategy) is not SingleDeviceStrategy:
        return False
    if type(trainer.precision_plugin) is not Precision:
        return False
    if is_overridden("backward", module, pl.LightningModule):
        return False
    return not any(is_overridden(h, module, pl.LightningModule)
                   or any(is_overridden(h, cb, Callback) for cb in trainer.callbacks)
                   for h in HOOKS)


class ManualStep:
    """``zero_grad``, backward and ``step`` of one Lightning optimiser, the plain way where the
    wrappers are inert (decided once per trainer), else through Lightning."""

    def __init__(self) -> None:
        self._trainer: weakref.ref | None = None  # weak: a deep copy must not copy the trainer
        self._plain = False
        self._checked = False

    def __call__(self, module: pl.LightningModule, opt: LightningOptimizer, loss: Tensor) -> None:
        trainer = module.trainer
        if self._trainer is None or self._trainer() is not trainer:
            self._trainer = weakref.ref(trainer)
            self._plain, self._checked = wrappers_inert(module), False
        before = getattr(opt, "_on_before_step", None)
        after = getattr(opt, "_on_after_step", None)
        if not (self._plain and callable(before) and callable(after)):
            opt.zero_grad()
            module.manual_backward(loss)
            opt.step()
            return
        opt.zero_grad()
        loss.backward()
        step = trainer.global_step
        before()
        opt.optimizer.step()
        after()
        if not self._checked:
            if trainer.global_step != step + 1:
                raise RuntimeError("Lightning no longer counts manual optimiser steps through "
                                   "LightningOptimizer._on_before_step/_on_after_step; "
                                   "transfer.distill.manual_step must be updated")
            self._checked = True
