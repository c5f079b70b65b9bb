"""Ctrl-C (SIGINT) and SIGTERM: one clear line on stderr (and in the run's ``log.txt``), exit
code 128 + the signal's number (130, 143), finished work kept for a rerun to resume.

Lightning catches a ``KeyboardInterrupt`` raised inside a fit, logs it at INFO (hidden without
``-v``) and calls ``sys.exit(1)``: an interrupted teacher fit would end as a silent failure. So
the command's own handler notes which signal came before it raises ``KeyboardInterrupt``, and a
``SystemExit`` that follows the signal is read as the interrupt it is (:func:`is_interrupt`).
SIGTERM (``kill PID``, a scheduler's preemption) is handled as Ctrl-C is: the command unwinds
(its workers are stopped on the way: :mod:`gemkd.experiments.run.executors`) instead of dying
with its children still training. The handlers are the command's only while it runs
(:func:`handled` puts the previous ones back).

A second signal while the command unwinds raises nothing (a second KeyboardInterrupt would cut
the unwinding short, workers still running, and end in a traceback from the interpreter's exit
handlers): it hurries the stop instead, the workers killed at once rather than given time to
save a checkpoint (:data:`gemkd.experiments.run.executors.HURRY`); a third raises again, for
code that swallowed the first. After an interrupted command the process's exit is quiet too:
a signal then ends it at once with 128 + its number (:func:`_quiet_exit`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: what an interrupted ``gemkd run`` says: its cache and ledger make a rerun resume
RUN_MESSAGE = "interrupted: finished steps are kept; rerun the same command to resume"
#: the signals a command turns into an orderly stop
SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: the shell's code for a process ended by SIGINT (128 + 2); SIGTERM's is 143
EXIT_CODE = 128 + signal.SIGINT

_received: int | None = None
_count = 0  # signals since the command started
_quiet_registered = False
_EXECUTORS = "gemkd.experiments.run.executors"


def _on_signal(signum: int, frame: object) -> None:
    global _received, _count
    _count += 1
    if _count == 2:  # the command is unwinding: stop its workers now, raise nothing
        if (executors := sys.modules.get(_EXECUTORS)) is not None:
            executors.HURRY.set()
        return
    if _received is None:
        _received = signum
    raise KeyboardInterrupt


def _exit_now(signum: int, frame: object) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(128 + signum)


def _quiet_exit() -> None:
    """Once this process starts to exit (after an interrupted command), a signal ends it at
    once, with no KeyboardInterrupt raised inside an exit handler (a traceback): registered
    with threading's exit hooks, which run first, before non-daemon threads are joined and
    before ``atexit``'s."""
    global _quiet_registered
    if _quiet_registered:
        return
    _quiet_registered = True

    def quiet() -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                signal.signal(signum, _exit_now)

    register = getattr(threading, "_register_atexit", None)
    try:
        (register or __import__("atexit").register)(quiet)
    except RuntimeError:  # already shutting down
        quiet()


@contextmanager
def handled() -> Iterator[None]:
    """Note SIGINT and SIGTERM for the duration of a command and put the handlers before it
    back after (Lightning leaves SIGINT ignored once it has handled one; a test that runs a
    command must not leave the command's handlers behind). Off the main thread, where no
    handler can be installed, a KeyboardInterrupt is still one."""
    global _received, _count
    _received, _count = None, 0
    if (executors := sys.modules.get(_EXECUTORS)) is not None:
        executors.HURRY.clear()
    previous: dict[int, object] = {}
    try:
        for signum in SIGNALS:
            previous[signum] = signal.signal(signum, _on_signal)
    except ValueError:  # not the main thread: nothing was installed
        yield
        return
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]


def is_interrupt(exc: BaseException) -> bool:
    """A KeyboardInterrupt, or the ``sys.exit`` Lightning turns one into."""
    return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit)
                                                  and _received is not None)


def exit_code() -> int:
    """128 + the signal that stopped the command (SIGINT when none was noted: a
    KeyboardInterrupt raised by other means); the process's exit is quiet from here on."""
    _quiet_exit()
    return 128 + (_received if _received is not None else signal.SIGINT)


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
