"""``gemkd teacher fit`` and ``gemkd teacher export``: argument parsing over the library
functions :func:`~gemkd.experiments.teacher.teacher_fit.fit_teacher` and
:func:`~gemkd.experiments.teacher.teacher_export.export_teacher`."""

from __future__ import annotations

import argparse
import functools
import sys

from gemkd.experiments.cli.declare import Command, Opt, arguments
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import EMB_DTYPES, STRATEGIES, TRACKERS
from gemkd.transfer.teacher_fit_dir import TeacherFitDir as Fit

#: a fit's files as the help texts name them
_CKPTS, _LAST = f"RUN_DIR/{Fit.CHECKPOINTS}", f"RUN_DIR/{Fit.CHECKPOINTS}/{Fit.LAST}"


def _progress(no_progress: bool) -> bool:
    """Lightning's bars on a terminal only: in a log file they are thousands of redrawn lines."""
    return not no_progress and sys.stderr.isatty()


def _tracker(kind: str) -> str | None:
    return None if kind == "none" else kind


def parse_days(text: str | None, flag: str = "--days") -> tuple[int, int] | None:
    """``"A:B"`` → the half-open day range ``(A, B)``."""
    if text is None:
        return None
    first, sep, end = text.partition(":")
    try:
        days = (int(first), int(end))
    except ValueError:
        days = None
    if not sep or days is None or days[0] >= days[1] or days[0] < 0:
        raise ConfigError(f"{flag} {text!r}: expected A:B with 0 <= A < B (half-open)")
    return days


def _fit(args: argparse.Namespace) -> None:
    from gemkd.experiments.teacher.teacher_fit import fit_teacher

    s = fit_teacher(**arguments(args))
    if not s["is_global_zero"]:
        return
    ne = next(((k.split("/")[1], v) for k, v in s.get("val", {}).items()
               if k.startswith("ne/") and k.endswith("/all")), None)
    resumed = f" (resumed from {s['resumed_from']})" if s["resumed_from"] else ""
    val = f"; val NE {ne[0]} {ne[1]:.4f}" if ne is not None else ""
    print(f"trained {s['name']} to step {s['global_step']}{resumed}; "
          f"{s['examples_per_s']:.0f} examples/s{val}; run dir {args.out}")


def _export(args: argparse.Namespace) -> None:
    from gemkd.experiments.teacher.teacher_export import export_teacher

    m = export_teacher(**arguments(args))
    if m is not None:
        print(f"exported {m.total_rows} rows ({len(m.shards)} shards, layer {m.layer!r}, "
              f"{m.emb_dtype}) of teacher {m.teacher_name} {m.teacher_version[:12]} "
              f"to {args.out}")


NO_PROGRESS = Opt("--no-progress", "no progress bar (there is none when stderr is not a "
                  "terminal)", flag=True, param="progress", convert=_progress,
                  own_default="a bar only when stderr is a terminal")
DATA = Opt("--data", "dataset directory", required=True, param="data")

COMMANDS = (
    Command(("teacher",), "train and export teacher models"),
    Command(("teacher", "fit"), "train a teacher with Lightning (resumable)", run=_fit,
            calls="gemkd.experiments.teacher.teacher_fit:fit_teacher", options=(
                Opt("--config", "YAML: model: {hparams} + trainer keys "
                    "(experiments/teacher/configs/*.yaml)", required=True, param="config"),
                DATA,
                Opt("--out", f"run directory ({Fit.CHECKPOINTS}, {Fit.METRICS})", required=True,
                    param="out"),
                Opt("--strategy", "override the config's strategy", choices=STRATEGIES,
                    param="strategy"),
                Opt("--devices", "override the config's devices (processes per node)",
                    type=int, positive=True, param="devices"),
                Opt("--num-nodes", "override the config's num_nodes (launch with torchrun or "
                    "SLURM)", type=int, positive=True, param="num_nodes"),
                Opt("--logger", f"experiment tracker: {Fit.METRICS} is always written (none and "
                    "csv: that alone); tensorboard (RUN_DIR/logs/tensorboard) or mlflow "
                    "(RUN_DIR/logs/mlruns, or MLFLOW_TRACKING_URI) log the fit too (extras "
                    "gemkd[tensorboard], gemkd[mlflow])", choices=("none", *TRACKERS),
                    default="none", param="tracker", convert=_tracker),
                Opt("--resume", f"continue from {_LAST} when it exists",
                    flag=True, param="resume"),
                Opt("--stream", "one time-ordered pass over the training days with a "
                    f"checkpoint at the end of every day ({_CKPTS}/{Fit.DAY_NAME}); the "
                    "config's max_epochs, select and patience become 1, last and none",
                    flag=True, param="stream", convert=lambda on: on or None),
                Opt("--train-days", "override the config's train_days (half-open A:B)",
                    param="train_days", convert=functools.partial(parse_days,
                                                                  flag="--train-days")),
                Opt("--continue-from", f"continue an earlier run (its {Fit.LAST} or a "
                    f"{Fit.DAY_NAME}: "
                    "weights and optimizer state) on later days; --train-days must start after "
                    "the last day it trained on", metavar="CKPT", param="continue_from"),
                NO_PROGRESS,
            )),
    Command(("teacher", "export"), "write a teacher's logits and embeddings to a store",
            run=_export, calls="gemkd.experiments.teacher.teacher_export:export_teacher", options=(
                Opt("--ckpt", f"{_LAST} (or FSDP dir)", required=True,
                    param="ckpt"),
                DATA,
                Opt("--out", "store directory to create", required=True, param="out"),
                Opt("--days", "half-open day range A:B (default: all)", param="days",
                    convert=parse_days),
                Opt("--layer", "named representation to store (default: the config's "
                    "repr_layer)", param="layer"),
                Opt("--emb-dtype", "how the store keeps the representation", choices=EMB_DTYPES,
                    default=EMB_DTYPES[0], param="emb_dtype"),
                Opt("--config", f"teacher config (default: RUN_DIR/{Fit.CONFIG} beside the "
                    "checkpoint)", param="config"),
                Opt("--batch-size", "examples per prediction batch", type=int, default=4096,
                    positive=True, param="batch_size"),
                Opt("--devices", "processes (DDP) per node", type=int, default=1, positive=True,
                    param="devices"),
                Opt("--num-nodes", "nodes (torchrun / SLURM)", type=int, default=1,
                    positive=True, param="num_nodes"),
                Opt("--overwrite", "replace an existing store", flag=True, param="overwrite"),
                NO_PROGRESS,
            )),
)
