"""Continuing an earlier run onto later days: its optimizer state, not only its weights.

Recurring training carries Adam's moments from one day's run to the next; restarting them (a
warm start, ``init_from``) spends the first steps re-estimating them with ID tables that are
already trained. Lightning restores optimizer state only with the whole loop (``ckpt_path``),
which would also restore the finished epoch of the earlier run, so the state is loaded here.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from gemkd.transfer.errors import ConfigError


class RestoreOptimizerState(Callback):
    """Loads the optimizer states saved in ``ckpt`` (a single-file Lightning checkpoint) into
    the trainer's optimizers before the first batch; their number and shapes must match."""

    def __init__(self, ckpt: str | Path) -> None:
        self.ckpt = Path(ckpt)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.ckpt.is_dir():
            raise ConfigError(f"continue_from {self.ckpt}: a sharded checkpoint; continuing "
                              "needs a single-file checkpoint")
        states = torch.load(self.ckpt, map_location="cpu", weights_only=False).get(
            "optimizer_states") or []
        if len(states) != len(trainer.optimizers):
            raise ConfigError(f"continue_from {self.ckpt}: {len(states)} optimizer state(s), "
                              f"this run has {len(trainer.optimizers)} optimizer(s)")
        for opt, state in zip(trainer.optimizers, states, strict=True):
            try:
                opt.load_state_dict(state)
            except (ValueError, RuntimeError) as e:
                raise ConfigError(f"continue_from {self.ckpt}: its optimizer state does not "
                                  f"fit this run's optimizer ({e})") from None
