"""``last.ckpt`` when a fit is interrupted: Ctrl-C or SIGTERM ends a fit after its current batch,
with a checkpoint a resumed fit continues from (at the next batch, not from zero).

Without it a fit interrupted between two saves (every epoch end, every
``checkpoint_every_n_steps`` and every few minutes:
:class:`~gemkd.transfer.training.timed_checkpoint.TimedCheckpoint`) lost every batch since the
last one; a Ctrl-C a minute into a teacher's first epoch restarted it from zero. While the fit
trains, the first SIGINT or SIGTERM is held until the batch in flight is done (a signal raised
inside an optimiser step would leave the weights half-updated), the checkpoint is saved
(Lightning writes it to a temporary file, then moves it), and the signal then goes to the handler
that was there before (the command's: it raises ``KeyboardInterrupt``, Lightning's own SIGTERM
handling, or the default). A second signal while one is held is delivered at once. A signal that
comes during validation is held until training resumes or ends. One process only: with several
ranks a save is collective, and Lightning's own SIGTERM handling applies.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from gemkd.transfer.training.latest_checkpoint import latest_checkpoint

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class InterruptCheckpoint(Callback):
    """Hold SIGINT/SIGTERM during training to the end of the batch in flight, save ``path`` (a
    fit's ``last.ckpt``), then pass the signal on (module docstring). The handlers it replaces
    are put back when training ends, however it ends."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._previous: dict[int, Any] = {}
        self._pending: int | None = None

    @property
    def state_key(self) -> str:
        return "InterruptCheckpoint"

    # -- the handlers ------------------------------------------------------------------------
    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # no handler can be installed off the main thread
        for signum in SIGNALS:
            current = signal.getsignal(signum)
            if current in (signal.SIG_IGN, None):
                continue  # ignored here (a worker's SIGINT): nothing to deliver
            self._previous[signum] = current
            signal.signal(signum, self._on_signal)

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, handler)
        self._previous = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._pending is not None:  # the second one: stop now
            self._deliver(signum)
            return
        self._pending = signum
        print(f"{signal.Signals(signum).name}: saving a checkpoint after this batch, then "
              "stopping (again to stop at once)", file=sys.stderr, flush=True)

    def _deliver(self, signum: int) -> None:
        """Hand ``signum`` to the handler this callback replaced."""
        handler = self._previous.get(signum, signal.SIG_DFL)
        self._restore()
        self._pending = None
        if callable(handler):
            handler(signum, None)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:  # the default action: end the process by the signal itself
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    # -- Lightning hooks ---------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pending = None
        if trainer.world_size == 1:
            self._install()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        self._save_and_stop(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save_and_stop(trainer)

    def _save_and_stop(self, trainer: pl.Trainer) -> None:
        if self._pending is None:
            return
        latest = latest_checkpoint(trainer)
        if latest is None:
            trainer.save_checkpoint(self.path)
        else:  # the one writer of last.ckpt: a step it saved already is not written again
            latest.save(trainer)
        self._deliver(self._pending)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pending = self._pending
        self._restore()
        self._pending = None
        if pending is not None:  # came after the last batch: the fit's own saves hold it all
            signal.raise_signal(pending)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        self._restore()
        self._pending = None
