"""Where a sweep's student runs execute (DESIGN §6, §8): in this process, in local worker
processes, or as tasks on an existing Ray cluster. Every executor takes the same
:class:`~gemkd.experiments.run.jobs.StudentRun` requests and hands each result back as it finishes;
the caller (one process) writes the ledger, so a dead worker loses only its own run and a
killed sweep resumes from ``runs.jsonl``. With ``pack_size`` K > 1 an executor's unit of work is
a pack of up to K compatible runs trained in one pass (:mod:`gemkd.experiments.run.packs`; each
member's numbers are its run's alone); 1 runs each run alone (a pack of one)."""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from gemkd.experiments.run.jobs import StudentRun
from gemkd.experiments.run.packs import DEFAULT_PACK_SIZE, execute_pack, group_packs
from gemkd.experiments.run.packs import run_alone as execute  # a run alone: a pack of one
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import EXECUTORS
from gemkd.transfer.process_reaper import reap_on_death
from gemkd.transfer.ray_cluster import import_ray, kept_handlers

Done = Callable[[StudentRun, dict[str, Any]], None]
RETRIES = 1  # a run whose worker died is tried once more on a fresh pool
#: seconds an aborted sweep's workers get to stop after SIGTERM (a teacher fit finishes its
#: batch and saves a checkpoint) before they are killed
STOP_SECONDS = 60.0
#: set (a second Ctrl-C: gemkd.experiments.cli.interrupt) to kill an aborted sweep's workers
#: at once instead of waiting STOP_SECONDS for them
HURRY = threading.Event()


class Executor(Protocol):
    @property
    def parallel(self) -> int:
        """Runs at a time."""

    @property
    def threads(self) -> int:
        """Torch threads of each run: a run's numbers depend on it (torch's CPU sums do)."""

    def run(self, runs: list[StudentRun], done: Done) -> None:
        """Execute every run; call ``done(run, result)`` in this process as each finishes."""

    def close(self, abort: bool = False) -> None:
        """Release the workers; ``abort`` (an interrupt or an error in the caller): stop the
        runs in flight instead of waiting for them, since nothing will record their results."""


def _run_pack(pack: list[StudentRun]) -> list[dict[str, Any]]:
    """A pack's records; a pack of one: :func:`execute` (a batched pack of one, so a run
    alone's numbers equal those it would have as a member of a pack)."""
    return [execute(pack[0])] if len(pack) == 1 else execute_pack(pack)


class Serial:
    """One run (or pack) after another in this process (``--workers 1``), each at ``threads``
    torch threads (None: the process's own), as a worker would run it: a run's numbers depend
    on its thread count, not on where it ran."""

    parallel = 1  # runs at a time (the progress bar's ETA divides by it)

    def __init__(self, threads: int | None = None, pack_size: int = 1) -> None:
        self._threads = threads
        self.pack_size = pack_size

    @property
    def threads(self) -> int:
        import torch

        return self._threads or torch.get_num_threads()

    def run(self, runs: list[StudentRun], done: Done) -> None:
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            for pack in group_packs(runs, self.pack_size):
                for r, res in zip(pack, _run_pack(pack), strict=True):
                    done(r, res)
        finally:
            torch.set_num_threads(before)

    def close(self, abort: bool = False) -> None:
        pass


def _start_worker(threads: int, verbose: bool, path: list[str], env: dict[str, str],
                  command: int | None = None) -> None:
    """A worker's process-wide settings, as the command has them: torch threads, quiet
    logging, the import path (a user's plug-ins) and the environment (the fork server that
    starts workers may be older than both); and its end with the command (pid ``command``)."""
    import torch

    from gemkd.transfer import stderr_output

    if command is not None:
        die_with(command)
    sys.path[:] = path
    os.environ.clear()
    os.environ.update(env)
    torch.set_num_threads(threads)
    stderr_output.configure(verbose, lightning=True)
    # the command decides when its workers stop: Ctrl-C reaches the whole terminal's process
    # group, workers included, and is the command's to handle; SIGTERM (the command's, as it
    # unwinds, or anyone's) ends the worker, whose job would otherwise catch it and take the
    # next one (a teacher fit first finishes its batch and saves a checkpoint:
    # gemkd.transfer.training.interrupt_checkpoint)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_stop)


def _worker_stop(signum: int, frame: object) -> None:
    """A worker's SIGTERM: end the process at once with the shell's code for the signal
    (its job's partial output is what a SIGKILL would leave: steps and runs are redone or
    resumed by the rerun)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + signum)


def die_with(pid: int) -> None:
    """End this process (``os._exit``) as soon as process ``pid`` ends, however it ends.

    A pool's workers are the fork server's children, not the command's, and wait on a queue
    whose write end every worker holds too: a command killed by SIGKILL, which has no chance
    to stop them, would leave them waiting for work forever, and with them the fork server
    (which runs while a worker holds its "alive" pipe) and multiprocessing's resource tracker
    (while any of them holds its pipe). Once the workers end, those two end by themselves.
    A daemon thread waits on a pidfd (Linux >= 5.3: readable when ``pid`` exits) or, where
    there is none, polls ``pid`` every second."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:  # gone already
        os._exit(128 + signal.SIGHUP)
    except (AttributeError, OSError):  # no pidfd here: poll
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while _running(pid):
                time.sleep(1.0)
        sys.stderr.flush()
        os._exit(128 + signal.SIGHUP)  # the shell's code for "its terminal (owner) went away"

    threading.Thread(target=watch, name=f"gemkd-die-with-{pid}", daemon=True).start()


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True  # no /proc: os.kill's word


class LocalProcesses:
    """``workers`` processes on this machine, each with ``threads`` torch threads. Started on
    first use and kept for the whole sweep: a worker opens a lag's stores and codes once. The
    ``forkserver`` start method: a fork of a process that has run torch can deadlock in its
    thread pools, and ``spawn`` would import torch anew for every worker."""

    def __init__(self, workers: int, threads: int, verbose: bool = False,
                 pack_size: int = 1) -> None:
        self.workers, self.threads, self.verbose = workers, threads, verbose
        self.parallel, self.pack_size = workers, pack_size
        self._pool: ProcessPoolExecutor | None = None

    def _get(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["gemkd.experiments.run.jobs",
                                        "gemkd.experiments.run.student"])
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_start_worker,
                initargs=(self.threads, self.verbose, list(sys.path), dict(os.environ),
                          os.getpid()))
        return self._pool

    def run(self, runs: list[StudentRun], done: Done) -> None:
        """A worker that dies (killed, out of memory) breaks the pool: the runs it did not
        finish go to a new pool, once more each; a run that kills its worker twice is an
        error naming it. Finished runs were handed to ``done`` already and are not redone."""
        todo, lost = list(runs), dict.fromkeys((r.key for r in runs), 0)
        while todo:
            try:
                self._run_on_pool(todo, done)
                return
            except BrokenProcessPool as e:
                self.close()
                todo = [r for r in todo if r.key not in self._finished]
                for r in todo:
                    lost[r.key] += 1
                    if lost[r.key] > RETRIES:
                        raise RuntimeError(f"student run {r.key!r}: its worker died "
                                           f"{lost[r.key]} times ({e})") from None

    def _run_on_pool(self, runs: list[StudentRun], done: Done) -> None:
        pool = self._get()
        self._finished: set[str] = set()
        pending = {pool.submit(_run_pack, p): p for p in group_packs(runs, self.pack_size)}
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                broken = None
                for f in finished:  # the runs that did finish are kept before a break is raised
                    pack = pending.pop(f)
                    if isinstance(f.exception(), BrokenProcessPool):
                        broken = f.exception()
                        continue
                    for run, result in zip(pack, f.result(), strict=True):
                        self._finished.add(run.key)
                        done(run, result)
                if broken is not None:
                    raise broken
        except BaseException:
            for f in pending:
                f.cancel()
            raise

    def map(self, fn: Callable[..., Any], calls: list[tuple]) -> Iterator[Any]:
        """``fn(*args)`` for each of ``calls`` on the workers, results as they finish (other
        jobs than student runs: a world's cached steps); the first error is raised, the calls
        not started are cancelled."""
        pool = self._get()
        pending = {pool.submit(fn, *args) for args in calls}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    yield f.result()
        finally:
            for f in pending:
                f.cancel()

    def close(self, abort: bool = False) -> None:
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        if abort:
            stop_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)


def stop_workers(pool: ProcessPoolExecutor, seconds: float = STOP_SECONDS) -> None:
    """SIGTERM every worker process of ``pool``, then SIGKILL those still alive after
    ``seconds`` (at once when :data:`HURRY` is set). (Python 3.14's ``terminate_workers`` does
    the first half; before it the pool's processes are only in its private ``_processes``.)"""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + seconds
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline \
            and not HURRY.is_set():
        time.sleep(0.05)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()


class RayTasks:
    """Each run a Ray task on the cluster at ``RAY_ADDRESS`` (or a local instance Ray starts),
    ``threads`` CPUs each. The run directory and data must be on storage every node reads (a
    shared file system); results come back to this process, which writes the ledger."""

    def __init__(self, threads: int, address: str | None = None, pack_size: int = 1) -> None:
        ray = import_ray("--executor ray")
        self.ray, self.threads, self.pack_size = ray, threads, pack_size
        self._pending: list = []
        if not ray.is_initialized():
            with kept_handlers():  # ray.init makes SIGTERM sys.exit(15) for good
                ray.init(address=address or os.environ.get("RAY_ADDRESS"),
                         include_dashboard=False, log_to_driver=False,
                         runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}})
            reap_on_death()  # a local instance's agents outlive a killed driver by ~60 s
        self._task = ray.remote(num_cpus=threads)(_ray_execute)
        self.parallel = max(1, int(ray.cluster_resources().get("CPU", 1) // threads))

    def run(self, runs: list[StudentRun], done: Done) -> None:
        pending = {self._task.remote(p, self.threads): p
                   for p in group_packs(runs, self.pack_size)}
        self._pending = list(pending)
        while pending:
            finished, _ = self.ray.wait(list(pending), num_returns=1)
            for ref in finished:
                for run, result in zip(pending.pop(ref), self.ray.get(ref), strict=True):
                    done(run, result)
        self._pending = []

    def close(self, abort: bool = False) -> None:
        """``abort``: cancel the tasks still running (their worker processes are killed)."""
        if abort:
            for ref in self._pending:
                self.ray.cancel(ref, force=True)
        self._pending = []


def _ray_execute(pack: list[StudentRun], threads: int) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(threads)
    return _run_pack(pack)


def default_workers(threads: int) -> int:
    """As many workers as the cores allow at ``threads`` torch threads each."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, threads))


def make_executor(workers: int | None = None, threads: int | None = None,
                  executor: str = "local", verbose: bool = False,
                  pack_size: int | None = None) -> Executor:
    """The executor of a run's student runs (``gemkd run --workers/--executor``).

    Parameters
    ----------
    workers
        Worker processes; 1: the serial path in this process; None: :func:`default_workers`.
    threads
        Torch threads of every student run, wherever it runs (None: 1).
    executor
        ``local`` (process pools on this machine) or ``ray`` (tasks on a Ray cluster; ``workers``
        is then the cluster's business).
    verbose
        Log each run as it starts and ends.
    pack_size
        Compatible runs trained together, up to this many per pass (None:
        :data:`~gemkd.experiments.run.packs.DEFAULT_PACK_SIZE`; 1: each alone).

    Returns
    -------
    Executor
        What :func:`gemkd.experiments.run.runner.run_experiment` takes as ``executor``.

    Raises
    ------
    ConfigError
        If ``pack_size`` < 1 or ``executor`` is not one of ``local``, ``ray``.
    """
    threads = threads or 1
    pack_size = DEFAULT_PACK_SIZE if pack_size is None else pack_size
    if pack_size < 1:
        raise ConfigError(f"--pack-size must be >= 1, got {pack_size}")
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    if executor == "ray":
        return RayTasks(threads, pack_size=pack_size)
    workers = default_workers(threads) if workers is None else workers
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    return Serial(threads, pack_size) if workers == 1 \
        else LocalProcesses(workers, threads, verbose, pack_size)
