"""The benchmark sweep's wall time per phase, read from a finished run (not re-run here).

    python -m benchmarks.bench_sweep [--run runs/benchmark] [--json OUT]

Why: the calibrated benchmark (``experiments/benchmark.yaml``: eight worlds, three lags, every
variant searched) must fit in an hour on 2 cores with ``--workers 2``; ``make results`` runs it
(~an hour), far too long for ``make bench``, so this reads the run's ``phases.json`` (the cached
steps, the tuning rounds, the final runs; :mod:`gemkd.experiments.run.runner`), ``command.txt``
and ``runs.jsonl`` and states the figures with the command that made them. A run directory that
does not exist or holds no ``phases.json`` is skipped with a line saying so (nothing written):
``make bench`` works before ``make results``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.common import figure, print_figures, write_json
from gemkd.experiments.run_dir import RunDir
from gemkd.transfer.errors import ConfigError

TARGET_MINUTES = 60


def sweep_figures(run: Path) -> tuple[list[dict], dict]:
    """The figures (minutes per phase, the total against :data:`TARGET_MINUTES`) and what the
    run was: its command, worlds, lags, variants and student runs (read through
    :class:`~gemkd.experiments.run_dir.RunDir`; a broken file is a ConfigError naming it)."""
    rd = RunDir(run)
    phases = rd.phases()
    if phases is None:
        raise ConfigError(f"{rd.phases_path}: not found")
    spec = rd.spec() or {}
    runs = len(rd.ledger())
    worlds = len(spec.get("data", {}).get("seeds") or [0])
    lags = spec.get("teacher_lag_days")
    lags = lags if isinstance(lags, list) else [lags]
    shape = (f"{worlds} worlds x {len(lags)} lags x {len(spec.get('variants', []))} variants, "
             f"{runs} student runs")
    total = sum(float(v) for v in phases.values()) / 60
    figs = [figure(f"benchmark sweep ({shape}): wall time of its phases", round(total, 1), "min",
                   f"<= {TARGET_MINUTES}")]
    figs += [figure(f"benchmark sweep: {name}", round(float(sec) / 60, 1), "min")
             for name, sec in phases.items()]
    return figs, {"run": str(run), "run_command": rd.command(), "shape": shape}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, default=Path("runs/benchmark"),
                   help="a finished `gemkd run experiments/benchmark.yaml` directory")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)
    if not (args.run / RunDir.PHASES).is_file():
        print(f"bench_sweep: {args.run}/{RunDir.PHASES} not found (run `make results` first); "
              "skipped")
        return 0
    try:
        figs, about = sweep_figures(args.run)
    except (OSError, ValueError, ConfigError) as e:
        print(f"error: bench_sweep: {args.run}: {e}", file=sys.stderr)
        return 1
    print(f"bench_sweep: {about['shape']} ({about['run_command']})")
    print_figures(figs)
    write_json(args.json, {"bench": "sweep", "figures": figs, **about})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
