"""``gemkd run`` and ``gemkd report``: argument parsing over
:func:`experiments.run.runner.run_experiment` and :mod:`experiments.report`."""

from __future__ import annotations

import argparse
from pathlib import Path


def _run(args: argparse.Namespace) -> None:
    from experiments.report import report_command
    from experiments.run.runner import run_experiment
    from experiments.spec import load_spec

    _quiet_lightning()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    spec = load_spec(args.spec, args.set)
    out = Path(args.out) if args.out else Path("runs") / spec.name
    run_experiment(spec, out)
    print(report_command(out))


def _quiet_lightning() -> None:
    """Dozens of short student fits: keep Lightning's per-fit banners out of the progress log."""
    import logging
    import warnings

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*Couldn't infer the batch indices.*")


def _report(args: argparse.Namespace) -> None:
    from experiments.report import report_command

    print(report_command(args.run_dir))


def add_parser(sub) -> None:
    r = sub.add_parser("run", help="the transfer experiment: teacher, store, every variant")
    r.add_argument("spec", nargs="?", default=None,
                   help="experiment YAML (default: experiments/quickstart.yaml)")
    r.add_argument("--out", default=None, help="run directory (default: runs/<spec name>)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec key, e.g. --set data.drift=0.5 --set seeds=[1,2,3]")
    r.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads for this process (default: torch's own choice); "
                        "use 1 when two jobs share the cores")
    r.set_defaults(func=_run)
    p = sub.add_parser("report", help="re-render report.md and plots of a run directory")
    p.add_argument("run_dir", help="a directory written by gemkd run")
    p.set_defaults(func=_report)
