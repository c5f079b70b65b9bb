"""``last.ckpt`` every few minutes of training, mid-epoch: what a killed fit resumes from.

A run's ``LatestCheckpoint`` saves at epoch ends (and every ``checkpoint_every_n_steps`` when
set), so a fit killed inside its first epoch — a teacher's epoch can be hours, a streaming pass
is one epoch — had nothing to resume and restarted from zero. This callback also saves
``last.ckpt`` after the first training batch that ends ``minutes`` after the previous save (or
the fit's start). The checkpoint holds the weights, the optimizer, the loop's position and the
training loader's (:class:`~gemkd.transfer.training.trainer.ResumableLoader`), so a resumed fit
replays the interrupted pass, skips the batches already trained on and continues with the next
one: it trains on the same batches as an uninterrupted fit. Lost on a kill: the batches since
the last save. Works under manual optimisation too (a domain FM's DistillModule), where
``ModelCheckpoint``'s ``train_time_interval`` does not save. It saves through the run's
:class:`~gemkd.transfer.training.latest_checkpoint.LatestCheckpoint` (one writer of
``last.ckpt``: a step already saved is not written again).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from gemkd.transfer.training.latest_checkpoint import latest_checkpoint

#: with several processes, whether a save is due is decided every this many steps (rank 0's
#: clock, broadcast: a collective, not one per batch)
SYNC_EVERY = 50


class TimedCheckpoint(Callback):
    """Save ``path`` (a fit's ``last.ckpt``) at the end of the first training batch ``minutes``
    (> 0, or 0: every batch) after the last save; with several processes rank 0's clock decides
    for every rank, every :data:`SYNC_EVERY` steps (a sharded FSDP save is collective).
    Lightning writes the file atomically (a temporary file, then a move)."""

    def __init__(self, path: str | Path, minutes: float) -> None:
        if not minutes >= 0:
            raise ValueError(f"minutes must be >= 0, got {minutes!r}")
        self.path = Path(path)
        self.seconds = 60.0 * minutes
        self._since: float | None = None

    @property
    def state_key(self) -> str:
        return f"TimedCheckpoint{{'seconds': {self.seconds}}}"

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._since = time.monotonic()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._since is None:
            self._since = time.monotonic()
        if trainer.world_size > 1 and trainer.global_step % SYNC_EVERY:
            return  # the ranks agree every SYNC_EVERY steps only (a broadcast is collective)
        due = trainer.strategy.broadcast(time.monotonic() - self._since >= self.seconds)
        if not due:
            return
        latest = latest_checkpoint(trainer)
        if latest is not None:
            latest.save(trainer)
        else:
            trainer.save_checkpoint(self.path)
        self._since = time.monotonic()
