"""Shared helpers for the benchmark scripts (and the studies' command-line conventions:
``--json``, ``--threads``, ``machine``, ``command``): side-by-side timing, figures and JSON output.

Every script writes one JSON file (``--json``) holding ``machine`` (where it ran), ``command``
(the exact command line), ``quick`` (reduced sizes: not reference figures) and ``figures``: a
flat list that ``python -m benchmarks.render_performance`` turns into
docs/results/PERFORMANCE.md, so a figure and its target are defined once, in the script that
measures it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import operator
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

MIN_REPEATS = 5
_OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


def median_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn`` over ``repeats`` runs after ``warmup`` untimed runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sync(device: str | torch.device) -> None:
    """Wait for queued GPU work, so a wall-clock interval covers it (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def interleaved_times(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
                      device: str = "cpu", rotate: bool = False) -> dict[str, list[float]]:
    """Seconds of every run of each ``fn``, timed in rounds that run every ``fn`` once (after
    ``warmup`` untimed rounds): load from other processes hits all candidates of a ratio alike.
    ``rotate`` starts each round one candidate later, so none always runs first or last.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)] if rotate else names
        for k in order:
            fn = fns[k]
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[k].append(time.perf_counter() - t0)
    return times


def interleaved(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
                device: str = "cpu") -> dict[str, float]:
    """Median seconds of each ``fn`` over interleaved rounds (see :func:`interleaved_times`)."""
    times = interleaved_times(fns, repeats, warmup, device)
    return {k: statistics.median(v) for k, v in times.items()}


def quiet_lightning() -> None:
    """A training benchmark's output is its table: Lightning's info lines and library warnings
    (hundreds of fits) are silenced for the process."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


@dataclass(frozen=True)
class ChildRun:
    """What a measured child process left: its stdout (empty unless captured), wall seconds,
    CPU seconds (user + system) and peak RSS in MB (``ru_maxrss`` of ``wait4``, what
    ``/usr/bin/time -v`` reports)."""

    stdout: str
    seconds: float
    cpu_seconds: float
    peak_mb: float


def run_child(argv: list[str], what: str, *, tree: Path | None = None, cwd: Path | None = None,
              threads: int = 1, capture: bool = True) -> ChildRun:
    """Run ``python argv`` in a fresh process and measure it: memory and CPU time are the
    process's own, whatever else the machine runs. ``tree``: import gemkd and the benchmarks
    from that checkout (another commit's, for a side-by-side), never writing bytecode into it.
    ``capture``: keep stdout (and stderr, for the error) instead of passing them through. A
    child that fails is a ``SystemExit`` naming ``what`` (and the end of its stderr)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONDONTWRITEBYTECODE": "1"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *argv], env=env, cwd=cwd, text=True,
                                stdout=out if capture else None,
                                stderr=err if capture else None)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{what} failed" + (f":\n{err.read()[-3000:]}" if capture else ""))
        return ChildRun(out.read(), seconds, usage.ru_utime + usage.ru_stime,
                        usage.ru_maxrss / 1024)


def add_common_args(p: argparse.ArgumentParser, device: bool = False) -> None:
    """``--json``, ``--quick``, ``--repeats``, ``--threads`` (and ``--device``) for every script."""
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes for a smoke run (figures are not the reference ones)")
    p.add_argument("--repeats", type=int, default=MIN_REPEATS,
                   help=f"timed repetitions after a warm-up (>= {MIN_REPEATS}); medians")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (default: torch's); 1 is steadier on a machine "
                        "shared with other jobs")
    if device:
        p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                       help="where the models run (CPU figures never depend on this flag)")


def apply_common_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Validate the shared flags and apply ``--threads``."""
    if args.repeats < MIN_REPEATS:
        p.error(f"--repeats must be at least {MIN_REPEATS}")
    if getattr(args, "device", "cpu") == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device")
    if args.threads:
        torch.set_num_threads(args.threads)


def figure(name: str, value: float | None, unit: str = "x", target: str | None = None,
           note: str = "") -> dict:
    """One row of the performance table. ``target`` is ``"<= 1.15"``-style (or None); ``met`` is
    derived here so the renderer and the console agree."""
    met = None
    if target is not None and value is not None:
        op, _, bound = target.partition(" ")
        met = bool(_OPS[op](value, float(bound)))
    return {"name": name, "value": value, "unit": unit, "target": target, "met": met,
            "note": note}


def print_figures(figures: list[dict]) -> None:
    for f in figures:
        mark = "" if f["met"] is None else ("  met" if f["met"] else "  MISSED")
        target = f" (target {f['target']})" if f["target"] else ""
        print(f"  {f['name']}: {fmt(f['value'], f['unit'])}{target}{mark}")


def fmt(value: float | None, unit: str) -> str:
    """A figure for humans: ratios to 2 decimals, rates with thousands separators."""
    if value is None:
        return "n/a"
    if unit == "x":
        return f"{value:.2f}x"
    if abs(value) >= 1000:
        return f"{value:,.0f} {unit}"
    if abs(value) >= 100:
        return f"{value:.0f} {unit}"
    return f"{value:.3g} {unit}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """Where a figure was measured: CPU, cores, load, library versions, date."""
    import numpy
    import pyarrow

    info = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pyarrow": pyarrow.__version__,
        "numpy": numpy.__version__,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    try:
        import lightning

        info["lightning"] = lightning.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def command() -> str:
    """The command line that produced the figures, as a user would type it: ``python -m
    benchmarks.<name> ...`` (or ``studies.<name>``) for a module run from the repository root,
    else the script's path."""
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main is not None and main.name and main.name != "__main__":
        return shlex.join(["python", "-m", main.name.removesuffix(".__main__"), *sys.argv[1:]])
    script = Path(sys.argv[0])
    try:
        script = script.resolve().relative_to(Path.cwd())
    except ValueError:
        pass
    return shlex.join(["python", str(script), *sys.argv[1:]])


def write_json(path: str | Path | None, results: dict) -> None:
    """``results`` plus ``machine`` and ``command``; nothing when ``path`` is None."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = {"machine": machine(), "command": command(), **results}
    path.write_text(json.dumps(out, indent=2) + "\n")
