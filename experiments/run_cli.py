"""``gemkd run`` and ``gemkd report``."""

from __future__ import annotations

import argparse
from pathlib import Path


def run_command(args: argparse.Namespace) -> None:
    from experiments.run.runner import run_experiment
    from experiments.run.spec import load_spec

    _quiet_lightning()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    spec = load_spec(args.spec, args.set)
    out = Path(args.out) if args.out else Path("runs") / spec.name
    run_experiment(spec, out)
    _report(out)


def _quiet_lightning() -> None:
    """Dozens of short student fits: keep Lightning's per-fit banners out of the progress log."""
    import logging
    import warnings

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*Couldn't infer the batch indices.*")


def report_command(args: argparse.Namespace) -> None:
    _report(Path(args.run_dir))


def _report(run_dir: Path) -> None:
    try:
        from experiments.report import report_command as render
    except ImportError:  # report module not installed yet: print the raw table
        import pandas as pd

        df = pd.read_csv(run_dir / "results.csv")
        print(df[df.domain == "all"].groupby(["teacher_lag_days", "variant", "task"])["ne"]
              .agg(["mean", "std"]).round(4).to_string())
        return
    print(render(run_dir))


def add_run_parsers(sub) -> None:
    r = sub.add_parser("run", help="the transfer experiment: teacher, store, every variant")
    r.add_argument("spec", nargs="?", default=None,
                   help="experiment YAML (default: experiments/quickstart.yaml)")
    r.add_argument("--out", default=None, help="run directory (default: runs/<spec name>)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec key, e.g. --set data.drift=0.5 --set seeds=[1,2,3]")
    r.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads for this process (default: torch's own choice); "
                        "use 1 when two jobs share the cores")
    r.set_defaults(func=run_command)
    p = sub.add_parser("report", help="re-render report.md and plots of a run directory")
    p.add_argument("run_dir", help="a directory written by gemkd run")
    p.set_defaults(func=report_command)
