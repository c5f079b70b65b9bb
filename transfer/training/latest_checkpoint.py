"""One copy of a fit's latest state: ``checkpoints/last.ckpt``, and nothing beside it.

Lightning's ``ModelCheckpoint(save_last=True)`` keeps an ``epoch=E-step=S.ckpt`` *and* an
identical ``last.ckpt``: every save wrote the state twice, and a run directory held it twice
(780 MB each for a small teacher). This callback writes ``last.ckpt`` alone, whole
(Lightning's atomic save: a temporary file, then a rename, so the older one is replaced only
once the newer is complete), at each epoch's end and every ``every_n_train_steps``;
:class:`~gemkd.transfer.training.timed_checkpoint.TimedCheckpoint` and a streaming pass's
:class:`~gemkd.transfer.training.day_checkpoints.DayCheckpoints` save through it, so a step is
never written twice (a day's checkpoint becomes ``last.ckpt`` by a hard link, not a copy).

A resume checkpoint needs the optimizer state; a finished fit's does not (export, warm starts
and parameter sharing read the weights): :func:`weights_only` rewrites it without (a third of
the size under AdamW).
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Checkpoint

from gemkd.transfer.io.atomic import atomic_write_bytes

#: the entries a resume needs and an export does not (what ``save_checkpoint(weights_only=True)``
#: leaves out)
TRAINING_STATE = ("optimizer_states", "lr_schedulers", "callbacks", "MixedPrecision",
                  "native_amp_scaling_state")
#: the key that marks a finished fit's checkpoint (weights only; resuming it is not possible)
FINAL = "gemkd_final"


class LatestCheckpoint(Checkpoint):
    """Save ``path`` (a fit's ``last.ckpt``: ``TeacherFitDir.last``) at every training epoch's
    end and every ``every_n_train_steps`` (None: epoch ends only). A ``Checkpoint`` subclass, so
    Lightning runs it after the other callbacks and adds no default ``ModelCheckpoint`` of its
    own."""

    def __init__(self, path: str | Path, every_n_train_steps: int | None = None) -> None:
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise ValueError(f"every_n_train_steps must be >= 1, got {every_n_train_steps}")
        self.path = Path(path)
        self.every = every_n_train_steps
        self._saved_step: int | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # a fresh fit has nothing to save before its first step; a resumed one holds this step
        self._saved_step = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.every is not None and trainer.global_step % self.every == 0:
            self.save(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.save(trainer)

    def save(self, trainer: pl.Trainer) -> bool:
        """Write the trainer's whole state (weights, optimizer, loops, callbacks) to
        ``last.ckpt`` unless this step is saved already; True if it wrote. Collective under a
        sharded strategy (every rank calls it at the same step)."""
        if self._saved_step == trainer.global_step:
            return False
        trainer.save_checkpoint(self.path)
        self._saved_step = trainer.global_step
        return True

    def link(self, trainer: pl.Trainer, saved: str | Path) -> None:
        """Make ``last.ckpt`` the checkpoint ``saved`` (of this step, in the same folder) by a
        hard link, replacing the older one in one rename: the state is on disk once."""
        if trainer.is_global_zero:
            tmp = self.path.with_name(f".{self.path.name}.link.tmp")
            tmp.unlink(missing_ok=True)
            try:
                os.link(saved, tmp)
            except OSError:  # a filesystem without hard links: a copy, still whole then renamed
                shutil.copyfile(saved, tmp)
            os.replace(tmp, self.path)
        trainer.strategy.barrier()
        self._saved_step = trainer.global_step


def latest_checkpoint(trainer: pl.Trainer) -> LatestCheckpoint | None:
    """The trainer's :class:`LatestCheckpoint`, if it has one."""
    # (Lightning's callback connector sets trainer.callbacks; Trainer does not declare it)
    callbacks = trainer.callbacks  # type: ignore[attr-defined]
    return next((c for c in callbacks if isinstance(c, LatestCheckpoint)), None)


def is_final(checkpoint: dict) -> bool:
    """Whether a loaded checkpoint is a finished fit's (weights only, :func:`weights_only`)."""
    return bool(checkpoint.get(FINAL))


def weights_only(path: str | Path) -> tuple[int, int]:
    """Rewrite the single-file checkpoint ``path`` without its training state (optimizer,
    schedulers, callbacks), marked final; atomically (a temporary file, then a rename). A
    sharded (directory) checkpoint or one already final is left as it is. Returns its size in
    bytes before and after."""
    path = Path(path)
    before = _size(path)
    if path.is_dir():
        return before, before
    state = torch.load(path, map_location="cpu", weights_only=False)
    if is_final(state):
        return before, before
    for key in TRAINING_STATE:
        state.pop(key, None)
    state[FINAL] = True
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    return before, _size(path)


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size
