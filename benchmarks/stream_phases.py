"""Where a training pass's wall time goes, phase by phase: a Lightning callback for
bench_teacher_stream.

Lightning's automatic optimisation runs, per batch: ``on_train_batch_start`` → ``training_step``
(forward + loss + logging) → ``zero_grad`` → ``backward`` → ``on_before_optimizer_step`` →
gradient clipping → ``optimizer.step`` → ``on_train_batch_end``; the loader's next batch is
fetched between one batch's end and the next one's start. Hook to hook, that is:

* ``read``: batch end (or epoch start) → next batch start, less any checkpoint written there
  (the next batch is fetched there);
* ``forward``: batch start → ``on_before_zero_grad`` (training_step: model, loss, ``self.log``);
* ``backward``: ``on_before_backward`` → ``on_after_backward``;
* ``zero_grad``: ``on_before_zero_grad`` → ``on_before_backward``, and ``on_after_backward`` →
  ``on_before_optimizer_step`` (the hooks between);
* ``clip+optimizer``: ``on_before_optimizer_step`` → batch end (gradient clipping,
  ``optimizer.step`` and the loop's bookkeeping);
* ``day_checkpoint``: inside a ``DayCheckpoints`` save (``day=N.ckpt`` and its hard link as
  ``last.ckpt``: once per streamed day), ``checkpoint``: inside any other
  ``trainer.save_checkpoint`` (the timed saves, and a fit's final ``last.ckpt`` where no day save
  holds its last step already; a streamed fit's is the last day's, linked: once per fit or
  per 10 minutes), wherever they happen (each taken out of the phase it happened in);
* ``loop_other``: the rest of ``on_train_start`` → ``on_train_end`` (epoch-end hooks, the
  Throughput log, the first batch's fetch set-up).

"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

PHASES = ("read", "forward", "backward", "zero_grad", "clip+optimizer", "day_checkpoint",
          "checkpoint", "loop_other")


class PhaseTimer(Callback):
    """Accumulates seconds per phase (:data:`PHASES`) over one fit; ``seconds()`` reads them,
    with ``loop`` (train start → train end) and ``steps``."""

    def __init__(self) -> None:
        self.acc = {p: 0.0 for p in PHASES}
        self.steps = 0
        self.loop = 0.0
        self._mark = 0.0  # the last hook's time
        self._ckpt_in_gap = 0.0
        self._depth = 0
        self._t_start = 0.0

    # ---- checkpoint writes, wherever they happen ---------------------------------------------
    def _timed(self, fn, phase: str):
        def run(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    dt = time.perf_counter() - t0
                    self.acc[phase] += dt
                    self._ckpt_in_gap += dt
        return run

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        from gemkd.transfer.training.day_checkpoints import DayCheckpoints

        trainer.save_checkpoint = self._timed(trainer.save_checkpoint, "checkpoint")  # type: ignore[method-assign]
        for cb in trainer.callbacks:  # type: ignore[attr-defined]
            if isinstance(cb, DayCheckpoints):
                cb._save = self._timed(cb._save, "day_checkpoint")  # type: ignore[method-assign]

    # ---- the step's phases -------------------------------------------------------------------
    def _lap(self, phase: str) -> None:
        """Charge the time since the last hook to ``phase``, less checkpoint writes in it."""
        now = time.perf_counter()
        self.acc[phase] += now - self._mark - self._ckpt_in_gap
        self._mark, self._ckpt_in_gap = now, 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._t_start = time.perf_counter()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._mark = time.perf_counter()
        self._ckpt_in_gap = 0.0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        self._lap("read")

    def on_before_zero_grad(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                            optimizer: Any) -> None:
        self._lap("forward")

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           loss: Any) -> None:
        self._lap("zero_grad")

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._lap("backward")

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: Any) -> None:
        self._lap("zero_grad")

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        self._lap("clip+optimizer")
        self.steps += 1

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.loop = time.perf_counter() - self._t_start

    def seconds(self) -> dict[str, float]:
        """Seconds per phase; ``loop_other`` = the loop's wall time less the timed phases."""
        out = dict(self.acc)
        out["loop_other"] = max(0.0, self.loop - sum(v for k, v in self.acc.items()
                                                     if k != "loop_other"))
        return {**out, "loop": self.loop, "steps": self.steps}
