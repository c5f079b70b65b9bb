"""The student's backward and optimiser step, without Lightning's wrappers where they are inert.

``manual_backward`` and ``LightningOptimizer.step`` exist for the precision plugin (AMP's loss
scaling and unscaling), the strategy (DDP's gradient sync, FSDP) and three hooks
(``on_before_backward``, ``on_after_backward``, ``on_before_optimizer_step``) on every callback
and on the module. On one device at full precision with none of those hooks overridden they do
nothing but dispatch empty hooks, ~6 of Lightning's hook calls a step (each sets
``_current_fx_name`` on the module twice and opens a profiler context per callback). There the
step is ``loss.backward()`` and the raw optimiser's ``step()``, exactly what the wrappers end up
calling (``Precision.backward`` calls ``LightningModule.backward``, which calls
``loss.backward()``; ``Precision.optimizer_step`` calls ``optimizer.step`` with a closure that
only runs those hooks; ``SingleDeviceStrategy`` has no ``pre_backward``/``post_backward``; the
gradient-norm clip, when asked for, is Lightning's public ``clip_gradients`` on either path).

Measured (a tiny labels-only CPU student, mlp hidden [8] on the tiny world, one
thread; steps/s over the steps after the tenth, the two paths interleaved, medians of 9 runs
each): batch 16, 255 steps: 972 vs 916 and 955 vs 895 steps/s (+6.2 %, +6.8 %); batch 64:
886 vs 840 (+5.4 %), i.e. ~0.07 ms of a ~1.1 ms step. On a loaded machine (two jobs on two
cores) the gain was 1.7-4.3 %, inside that run-to-run spread. The bypass is kept for that
5-7 %; the student's step must also equal the public path's bit for bit
(``tests/benchmarks/test_bare.py``).

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
                   or any(is_overridden(h, cb, Callback)
                          # set by Lightning's callback connector, undeclared on Trainer
                          for cb in trainer.callbacks)  # type: ignore[attr-defined]
                   for h in HOOKS)


class ManualStep:
    """``zero_grad``, backward and ``step`` of one Lightning optimiser, the plain way where the
    wrappers are inert (decided once per trainer), else through Lightning."""

    def __init__(self) -> None:
        self._trainer: weakref.ref | None = None  # weak: a deep copy must not copy the trainer
        self._plain = False
        self._checked = False

    def __call__(self, module: pl.LightningModule, opt: LightningOptimizer, loss: Tensor,
                 grad_clip: float | None = None) -> None:
        """``zero_grad``, backward, the gradient-norm clip to ``grad_clip`` (if given), step."""
        trainer = module.trainer
        if self._trainer is None or self._trainer() is not trainer:
            self._trainer = weakref.ref(trainer)
            self._plain, self._checked = wrappers_inert(module), False
        before = getattr(opt, "_on_before_step", None)
        after = getattr(opt, "_on_after_step", None)
        if not (self._plain and callable(before) and callable(after)):
            opt.zero_grad()
            module.manual_backward(loss)
            _clip(module, opt, grad_clip)
            opt.step()
            return
        opt.zero_grad()
        loss.backward()
        _clip(module, opt, grad_clip)
        step = trainer.global_step
        before()
        opt.optimizer.step()
        after()
        if not self._checked:
            if trainer.global_step != step + 1:
                raise RuntimeError("Lightning no longer counts manual optimiser steps through "
                                   "LightningOptimizer._on_before_step/_on_after_step; "
                                   "gemkd.transfer.distill.manual_step must be updated")
            self._checked = True


def _clip(module: pl.LightningModule, opt: LightningOptimizer, grad_clip: float | None) -> None:
    if grad_clip is not None:
        # the torch optimiser the wrapper holds: what clip_gradients reads the groups of
        module.clip_gradients(opt.optimizer, gradient_clip_val=grad_clip,
                              gradient_clip_algorithm="norm")
