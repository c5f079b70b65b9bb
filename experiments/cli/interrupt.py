"""Ctrl-C: one clear line on stderr (and in the run's ``log.txt``), exit code 130.

Lightning catches a ``KeyboardInterrupt`` raised inside a fit, logs it at INFO (hidden without
``-v``) and calls ``sys.exit(1)``: an interrupted teacher fit would end as a silent failure. So
the command's own SIGINT handler notes that the signal came before it raises
``KeyboardInterrupt``, and a ``SystemExit`` that follows the signal is read as the interrupt it
is (:func:`is_interrupt`).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: what an interrupted ``gemkd run`` says: its cache and ledger make a rerun resume
RUN_MESSAGE = "interrupted: finished steps are kept; rerun the same command to resume"
#: the shell's code for a process ended by SIGINT (128 + 2)
EXIT_CODE = 128 + signal.SIGINT

_received = False


def _on_sigint(signum: int, frame: object) -> None:
    global _received
    _received = True
    raise KeyboardInterrupt


@contextmanager
def handled() -> Iterator[None]:
    """Note SIGINT for the duration of a command (the handler before it is put back after:
    Lightning leaves SIGINT ignored once it has handled one). Off the main thread, where no
    handler can be installed, a KeyboardInterrupt is still one."""
    global _received
    _received = False
    try:
        previous = signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def is_interrupt(exc: BaseException) -> bool:
    """A KeyboardInterrupt, or the ``sys.exit`` Lightning turns one into."""
    return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit) and _received)


@contextmanager
def noted_in(log: Path, message: str = RUN_MESSAGE) -> Iterator[None]:
    """Append ``message`` to ``log`` (a run's ``log.txt``, in its timestamped format) when the
    block is interrupted, then let the interrupt go on. Nothing is written where the block had
    not yet made the log's folder."""
    try:
        yield
    except BaseException as e:
        if is_interrupt(e) and log.parent.is_dir():
            with open(log, "a") as f:
                f.write(f"{time.strftime('%H:%M:%S')} {message}\n")
        raise
