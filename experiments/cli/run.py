"""``gemkd run`` and ``gemkd report``: argument parsing over
:func:`gemkd.experiments.run.runner.run_experiment` and :mod:`gemkd.experiments.report`."""

from __future__ import annotations

import argparse
from pathlib import Path

from gemkd.experiments.cli import interrupt
from gemkd.experiments.cli.declare import Command, Opt, arguments
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import EXECUTORS, TRACKERS


def _run(args: argparse.Namespace) -> None:
    from gemkd.experiments.report import report_command
    from gemkd.experiments.run.executors import make_executor
    from gemkd.experiments.run.preflight import check_spec
    from gemkd.experiments.run.runner import run_experiment
    from gemkd.experiments.run_dir import RunDir
    from gemkd.experiments.spec import load_spec
    from gemkd.transfer.io import fs

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    spec = load_spec(**arguments(args, LOAD_SPEC))
    if args.logger is not None:
        spec.logger = None if args.logger == "none" else args.logger
    out = args.out or str(Path("runs") / spec.name)
    check_spec(spec)  # before a worker pool or a Ray connection starts
    executor = make_executor(verbose=args.verbose, **arguments(args, MAKE_EXECUTOR))
    if fs.is_remote(out):  # an object store: a local working copy, mirrored as the run goes
        from gemkd.experiments.run.remote import working_copy

        with working_copy(out) as copy:
            print(f"working copy of {out}: {copy.local}")
            with interrupt.noted_in(Path(copy.local) / RunDir.LOG):
                run_experiment(spec, copy.local, sync=copy.sync, executor=executor)
            print(report_command(copy.local))
        return
    with interrupt.noted_in(Path(out) / RunDir.LOG):
        run_experiment(spec, Path(out), executor=executor)
    print(report_command(out))


def _report(args: argparse.Namespace) -> None:
    from gemkd.experiments.report import report_command

    if args.pair:
        from gemkd.experiments.report.variant_pairs import pair_lines, paired_difference

        if len(args.run_dir) != 1:
            raise ConfigError("gemkd report --pair takes one RUN_DIR")
        variant, reference = args.pair
        for line in pair_lines(paired_difference(args.run_dir[0], variant, reference)):
            print(line)
        return
    if args.markdown:
        from gemkd.experiments.report.results_md import knobs_path, write_results

        page = write_results(args.markdown, args.run_dir, args.title)
        print(f"wrote {page} and {knobs_path(page)}")
        return
    if len(args.run_dir) != 1:
        raise ConfigError("gemkd report takes one RUN_DIR (several only with --markdown)")
    print(report_command(args.run_dir[0]))


LOAD_SPEC = "gemkd.experiments.spec.load:load_spec"
MAKE_EXECUTOR = "gemkd.experiments.run.executors:make_executor"

COMMANDS = (
    Command(("run",), "the transfer experiment: teacher, store, every variant", run=_run, options=(
        Opt("spec", "experiment YAML (default: experiments/quickstart.yaml)", nargs="?",
            param=f"{LOAD_SPEC}.path"),
        Opt("--out", "run directory (default: runs/<spec name>); an s3:// URI works through a "
            "local working copy synced after every step"),
        Opt("--set", "override a spec key, e.g. --set data.overrides.drift=0.5 --set seeds=[1,2,3]",
            many=True, metavar="KEY=VALUE", param=f"{LOAD_SPEC}.sets",
            convert=lambda sets: list(sets) or None),
        Opt("--threads", "torch CPU threads of this process's steps (default: torch's own "
            "choice) and of every student run (default 1). Results depend on it (torch's CPU "
            "sums do); README's and docs/results/RESULTS.md's tables are at 1", type=int,
            positive=True, param=f"{MAKE_EXECUTOR}.threads"),
        Opt("--workers", "student runs side by side in this many local processes (default: as "
            "many as the cores allow at --threads each; 1: one after another in this process). "
            "Results do not depend on it: every student run uses --threads threads wherever it "
            "runs", type=int, positive=True, param=f"{MAKE_EXECUTOR}.workers"),
        Opt("--executor", "local: this machine's processes (--workers); ray: tasks on the Ray "
            "cluster at RAY_ADDRESS (or a local instance), --threads CPUs each; needs pip "
            "install 'gemkd[ray]' and a run directory every node reads", choices=EXECUTORS,
            default="local", param=f"{MAKE_EXECUTOR}.executor"),
        Opt("--pack-size", "train up to this many student runs that differ only in seed and "
            "float knobs (alpha, temperature, aux_beta, lr, ema_decay) in one pass over their "
            "data (default 16); each run's numbers are its own, bit for bit; 1: each run alone",
            type=int, positive=True, param=f"{MAKE_EXECUTOR}.pack_size"),
        # None keeps the spec's key; its default is the spec's
        Opt("--logger", "log the teacher fit and every student run to an experiment tracker "
            "under RUN_DIR/logs (default: the spec's logger key, else none); tensorboard and "
            "mlflow are extras: pip install 'gemkd[mlflow]'", choices=("none", *TRACKERS),
            param="gemkd.experiments.spec.run_spec:RunSpec.logger",
            convert=lambda kind: None if kind in (None, "none") else kind),
    )),
    Command(("report",), "re-render report.md and plots of a run directory, or with "
            "--markdown one page comparing several runs", run=_report, options=(
                Opt("run_dir", "directories written by gemkd run", nargs="+"),
                Opt("--markdown", "write one page with every RUN_DIR side by side "
                    "(docs/results/RESULTS.md)", metavar="OUT.md"),
                Opt("--title", "the page's title (--markdown)", default="gemkd results",
                    param="gemkd.experiments.report.results_md:write_results.title"),
                Opt("--pair", "print ΔNE(VARIANT) - ΔNE(REFERENCE) per lag, domain and task "
                    "with the report's paired interval and verdict (e.g. kd_aux_adapter kd_aux: "
                    "the Student Adapter's own gain)", nargs=2, metavar=("VARIANT", "REFERENCE")),
            )),
)
