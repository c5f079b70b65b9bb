"""How far a ``gemkd run`` has got: one overall bar on a terminal, plain timestamped lines
elsewhere (CI, a log file), and every message in ``RUN_DIR/log.txt`` either way.

The bar counts student runs (tuning candidates and final runs of every variant, seed and lag,
counted before the first one starts) and shows the cached steps done, the time elapsed and an
ETA from the student runs trained so far (a run reused from ``runs.jsonl`` takes no time and is
not part of the estimate).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

from tqdm import tqdm


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
                 on_change: Callable[[], None] | None = None) -> None:
        self.on_change = on_change
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
        self._report()

    def run_done(self, seconds: float | None) -> None:
        """One student run finished; ``seconds`` None: reused from the ledger, not trained."""
        self.runs += 1
        if seconds is not None:
            self.trained += 1
            self.trained_seconds += seconds
        if self.bar is not None:
            self.bar.update(1)
        self._report()

    def _report(self) -> None:
        if self.on_change is not None:
            self.on_change()
        if self.bar is not None:
            self._refresh(self.bar)
        else:
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
