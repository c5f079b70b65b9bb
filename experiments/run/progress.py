"""How far a ``gemkd run`` has got: one overall bar on a terminal, plain timestamped lines
elsewhere (CI, a log file), and every message in ``RUN_DIR/log.txt`` either way.

The bar counts student runs (tuning candidates and final runs of every variant, seed and lag,
counted before the first one starts) and shows the cached steps done, the time elapsed and an
ETA from the student runs trained so far (a run reused from ``runs.jsonl`` takes no time and is
not part of the estimate). Off a terminal the same status is a ``progress:`` line after every
cached step, and during the student runs every :data:`EVERY` seconds or tenth of the runs (not
one per run: a sweep has hundreds); a teacher fit adds its own lines (:class:`FitProgress`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

from lightning.pytorch.callbacks import Callback
from tqdm import tqdm

#: seconds between two progress lines off a terminal (student runs, a teacher fit)
EVERY = 30.0


def clock(seconds: float) -> str:
    """``3725`` → ``1:02:05``; under an hour ``m:ss``."""
    s = int(round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def _columns(stream: IO[str]) -> int | None:
    """None where the terminal reports its width (tqdm follows it); 100 where it reports 0
    (a pseudo-terminal without a size, e.g. under ``script`` or an IDE's runner), on which tqdm
    would otherwise draw nothing at all (it needs a row count then too: 20)."""
    try:
        return None if os.get_terminal_size(stream.fileno()).columns > 0 else 100
    except (AttributeError, OSError, ValueError):  # not a real file: tqdm decides
        return None


@runtime_checkable
class StepLog(Protocol):
    """What the pipeline's steps report to: ``log(msg)`` one line, ``log.step_done(name)`` a
    cached step finished (done or found in the cache). :class:`Progress` is one; a plain
    function of one message becomes one through :func:`step_log`."""

    def __call__(self, msg: str) -> None: ...

    def step_done(self, name: str) -> None: ...


class PlainLog:
    """A :class:`StepLog` that hands each line to ``write`` (default: ``print``) and counts
    nothing."""

    def __init__(self, write: Callable[[str], None] = print) -> None:
        self.write = write

    def __call__(self, msg: str) -> None:
        self.write(msg)

    def step_done(self, name: str) -> None:
        return None


def step_log(log: StepLog | Callable[[str], None]) -> StepLog:
    """``log`` as a :class:`StepLog`: itself, or a plain function of one message wrapped in a
    :class:`PlainLog`."""
    return log if isinstance(log, StepLog) else PlainLog(log)


class Progress:
    """The run's log (a :class:`StepLog`: a callable taking one message) and its progress
    counters."""

    def __init__(self, log_path: Path, total_runs: int, total_steps: int,
                 stream: IO[str] | None = None, tty: bool | None = None,
                 on_change: Callable[[], None] | None = None, every: float = EVERY) -> None:
        self.on_change = on_change
        self.every = every
        self._printed, self._tenth = -float("inf"), 0
        self.stream = stream if stream is not None else sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.file = open(log_path, "a")  # noqa: SIM115 - kept open for the run, closed by close()
        self.total_runs, self.total_steps = total_runs, total_steps
        self.runs = self.steps = 0
        self.t0 = time.monotonic()
        self.trained_seconds, self.trained = 0.0, 0
        self.bar = None
        if self.tty:
            width = _columns(self.stream)
            self.bar = tqdm(total=total_runs, file=self.stream, dynamic_ncols=width is None,
                            ncols=width, nrows=None if width is None else 20, leave=True,
                            bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} student runs, "
                                       "{elapsed} elapsed{postfix}")
            self._refresh(self.bar)

    def __call__(self, msg: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)
        self.file.write(line + "\n")
        self.file.flush()

    def record(self, msg: str) -> None:
        """A line for ``log.txt`` only (the command prints its own ``error:`` line)."""
        self.file.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
        self.file.flush()

    def eta(self) -> float | None:
        """Seconds left for the student runs not done, at the mean time of those trained."""
        if not self.trained:
            return None
        return self.trained_seconds / self.trained * (self.total_runs - self.runs)

    def status(self) -> str:
        eta = self.eta()
        return (f"{self.runs}/{self.total_runs} student runs, {self.steps}/{self.total_steps} "
                f"steps, {clock(time.monotonic() - self.t0)} elapsed, ETA "
                f"{clock(eta) if eta is not None else '?'}")

    def step_done(self, name: str) -> None:
        self.steps += 1
        self._report(force=True)

    def run_done(self, seconds: float | None) -> None:
        """One student run finished; ``seconds`` None: reused from the ledger, not trained."""
        self.runs += 1
        if seconds is not None:
            self.trained += 1
            self.trained_seconds += seconds
        if self.bar is not None:
            self.bar.update(1)
        self._report()

    def _report(self, force: bool = False) -> None:
        """The bar, or (off a terminal) a ``progress:`` line when ``force``d, when the runs
        reach a new tenth of the total or the last one, or :attr:`every` seconds after the
        previous line."""
        if self.on_change is not None:
            self.on_change()
        if self.bar is not None:
            self._refresh(self.bar)
            return
        now = time.monotonic()
        tenth = 10 * self.runs // max(1, self.total_runs)
        if (force or tenth > self._tenth or self.runs == self.total_runs
                or now - self._printed >= self.every):
            self._printed, self._tenth = now, tenth
            self(f"progress: {self.status()}")

    def _refresh(self, bar: tqdm) -> None:
        eta = self.eta()
        bar.set_description_str(f"steps {self.steps}/{self.total_steps}", refresh=False)
        bar.set_postfix_str(f"ETA {clock(eta) if eta is not None else '?'}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.file.close()


class FitProgress(Callback):
    """A line to ``log`` every ``every`` seconds of a fit, and one at each epoch's end: where a
    teacher fit of minutes is, which a piped ``gemkd run`` otherwise shows nothing of (e.g.
    ``teacher fit: epoch 1/2, batch 120/252 (48 %), 1:05 elapsed``)."""

    def __init__(self, log: Callable[[str], None], name: str = "teacher fit",
                 every: float = EVERY) -> None:
        # not ``self.log``: Lightning gives a callback's ``log`` the module's (metric) log
        self.write, self.name, self.every = log, name, every
        self._t0 = self._last = 0.0

    def on_train_start(self, trainer, pl_module) -> None:
        self._t0 = self._last = time.monotonic()

    def _where(self, trainer, batch: int | None) -> str:
        epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        text = f"{self.name}: epoch {trainer.current_epoch + 1}{f'/{epochs}' if epochs else ''}"
        total = _batches(trainer)
        if batch is not None:
            text += f", batch {batch}" + (f"/{total} ({100 * batch // total} %)" if total
                                           else "")
        return f"{text}, {clock(time.monotonic() - self._t0)} elapsed"

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self.write(self._where(trainer, batch_idx + 1))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        loss = trainer.callback_metrics.get("val/loss")
        tail = f", validation loss {float(loss):.4f}" if loss is not None else ""
        self.write(f"{self._where(trainer, None)}: epoch done{tail}")
        self._last = time.monotonic()


def _batches(trainer) -> int | None:
    """Training batches per pass: Lightning's count when the loader has a length, else the
    gemkd reader's (its row groups in batches: what ``even_batch_limit`` counts), else None."""
    n = trainer.num_training_batches
    if isinstance(n, int) and n > 0:
        return n
    reader = getattr(getattr(trainer, "train_dataloader", None), "dataset", None)
    units, size = getattr(reader, "units", None), getattr(reader, "batch_size", None)
    if not units or not size:
        return None
    return sum(-(-u.n_rows // size) for u in units)
