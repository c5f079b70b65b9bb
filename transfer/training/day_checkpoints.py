"""Checkpoints at the end of every day of a time-ordered (streaming) pass (their names and
paths: :class:`~gemkd.transfer.teacher_fit_dir.TeacherFitDir`).

``checkpoints/day=N.ckpt`` is the model as it was after its last batch of day N: the teacher that
is L days old for a student whose stream starts at day N + L + 1 (DESIGN §6.1, the streaming
protocol). Every day's end also makes it ``last.ckpt`` (a hard link: one copy on disk), so a
killed pass resumes from the last finished day at the latest (or from a later save). Day
checkpoints keep the optimizer state: a later run continues from one (``continue_from``).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from gemkd.transfer.errors import DataError
from gemkd.transfer.teacher_fit_dir import TeacherFitDir
from gemkd.transfer.training.latest_checkpoint import latest_checkpoint


class DayCheckpoints(Callback):
    """Saves ``day=N.ckpt`` when the pass moves from day N to a later day, and the last day's at
    the end of the epoch. The batches must come in time order (a ``DatasetReader`` with
    ``stream=True``): a batch of an earlier day is a DataError. One process only (ranks could be
    on different days). The current day is part of the checkpoint, so a pass resumed just
    after a day's last batch still saves that day."""

    def __init__(self, fit_dir: TeacherFitDir) -> None:
        self.fit_dir = fit_dir
        self.day: int | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        day = int(batch.day[0])
        if self.day is not None and day != self.day:
            if day < self.day:
                raise DataError(f"streaming pass: a batch of day {day} after day {self.day}; "
                                "daily checkpoints need the days in time order (stream: true)")
            self._save(trainer, self.day)
        self.day = day

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.day is not None:
            self._save(trainer, self.day)

    def _save(self, trainer: pl.Trainer, day: int) -> None:
        path = self.fit_dir.day(day)
        tmp = path.with_name(f".{path.name}.tmp")
        # written whole, then renamed: never a partial day=N.ckpt; with the optimizer state
        trainer.save_checkpoint(tmp, weights_only=False)
        if trainer.is_global_zero:
            os.replace(tmp, path)
        latest = latest_checkpoint(trainer)
        if latest is not None:  # last.ckpt is this day's file (and this step is saved)
            latest.link(trainer, path)
        elif trainer.is_global_zero:
            last = self.fit_dir.last
            tmp = last.with_name(f".{last.name}.tmp")
            shutil.copyfile(path, tmp)
            os.replace(tmp, last)

    def state_dict(self) -> dict[str, Any]:
        return {"day": self.day}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.day = state_dict.get("day")
