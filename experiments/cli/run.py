"""``gemkd run`` and ``gemkd report``: argument parsing over
:func:`gemkd.experiments.run.runner.run_experiment` and :mod:`gemkd.experiments.report`."""

from __future__ import annotations

import argparse
from pathlib import Path

from gemkd.experiments.run.executors import EXECUTORS
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import TRACKERS


def _run(args: argparse.Namespace) -> None:
    from gemkd.experiments.report import report_command
    from gemkd.experiments.run.executors import make_executor
    from gemkd.experiments.run.runner import run_experiment
    from gemkd.experiments.run.validate import check_spec
    from gemkd.experiments.spec import load_spec
    from gemkd.transfer.io import fs

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    spec = load_spec(args.spec, args.set)
    if args.logger is not None:
        spec.logger = None if args.logger == "none" else args.logger
    out = args.out or str(Path("runs") / spec.name)
    check_spec(spec)  # before a worker pool or a Ray connection starts
    executor = make_executor(args.workers, args.threads, args.executor, args.verbose)
    if fs.is_remote(out):  # an object store: a local working copy, mirrored as the run goes
        from gemkd.experiments.run.remote import working_copy

        with working_copy(out) as copy:
            print(f"working copy of {out}: {copy.local}")
            run_experiment(spec, copy.local, sync=copy.sync, executor=executor)
            print(report_command(copy.local))
        return
    run_experiment(spec, Path(out), executor=executor)
    print(report_command(out))


def _report(args: argparse.Namespace) -> None:
    from gemkd.experiments.report import report_command

    if args.pair:
        from gemkd.experiments.report.pairs import paired_difference

        if len(args.run_dir) != 1:
            raise ConfigError("gemkd report --pair takes one RUN_DIR")
        variant, reference = args.pair
        table = paired_difference(args.run_dir[0], variant, reference)
        for _, r in table.iterrows():
            worlds = ", ".join(f"{w}: {d:+.4f}" for w, d in r["per_world"].items())
            print(f"lag {r['teacher_lag_days']} {r['domain']} {r['task']}: {variant} - "
                  f"{reference} ΔNE {r['diff']:+.4f} [{r['diff_lo']:+.4f}, {r['diff_hi']:+.4f}] "
                  f"{r['verdict']} (worlds {worlds})")
        return
    if args.markdown:
        from gemkd.experiments.report.results_md import write_results

        print(f"wrote {write_results(args.markdown, args.run_dir, args.title)}")
        return
    if len(args.run_dir) != 1:
        raise ConfigError("gemkd report takes one RUN_DIR (several only with --markdown)")
    print(report_command(args.run_dir[0]))


def add_parser(sub) -> None:
    r = sub.add_parser("run", help="the transfer experiment: teacher, store, every variant")
    r.add_argument("spec", nargs="?", default=None,
                   help="experiment YAML (default: experiments/quickstart.yaml)")
    r.add_argument("--out", default=None, help="run directory (default: runs/<spec name>); an "
                   "s3:// URI works through a local working copy synced after every step")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec key, e.g. --set data.drift=0.5 --set seeds=[1,2,3]")
    r.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads of this process's steps (default: torch's own "
                        "choice) and of every student run (default 1). Results depend on it "
                        "(torch's CPU sums do); README's and docs/RESULTS.md's tables are at 1")
    r.add_argument("--workers", type=int, default=None,
                   help="student runs side by side in this many local processes (default: as "
                        "many as the cores allow at --threads each; 1: one after another in "
                        "this process). Results do not depend on it: every student run "
                        "uses --threads threads wherever it runs")
    r.add_argument("--executor", choices=list(EXECUTORS), default="local",
                   help="local: this machine's processes (--workers); ray: tasks on the Ray "
                        "cluster at RAY_ADDRESS (or a local instance), --threads CPUs each; "
                        "needs pip install 'gemkd[ray]' and a run directory every node reads")
    r.add_argument("--logger", choices=["none", *TRACKERS], default=None,
                   help="log the teacher fit and every student run to an experiment tracker "
                        "under RUN_DIR/logs (default: the spec's logger key, else none); "
                        "tensorboard and mlflow are extras: pip install 'gemkd[mlflow]'")
    r.set_defaults(func=_run)
    p = sub.add_parser("report", help="re-render report.md and plots of a run directory, or "
                       "with --markdown one page comparing several runs")
    p.add_argument("run_dir", nargs="+", help="directories written by gemkd run")
    p.add_argument("--markdown", default=None, metavar="OUT.md",
                   help="write one page with every RUN_DIR side by side (docs/RESULTS.md)")
    p.add_argument("--title", default="gemkd results", help="the page's title (--markdown)")
    p.add_argument("--pair", nargs=2, default=None, metavar=("VARIANT", "REFERENCE"),
                   help="print ΔNE(VARIANT) - ΔNE(REFERENCE) per lag, domain and task with the "
                        "report's paired interval and verdict (e.g. kd_aux_adapter kd_aux: the "
                        "Student Adapter's own gain)")
    p.set_defaults(func=_report)
