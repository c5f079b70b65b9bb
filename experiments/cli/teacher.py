"""``gemkd teacher fit`` and ``gemkd teacher export``: argument parsing over the library
functions :func:`~gemkd.experiments.teacher_fit.fit_teacher` and
:func:`~gemkd.experiments.teacher_export.export_teacher`."""

from __future__ import annotations

import argparse
import sys

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import EMB_DTYPES, STRATEGIES, TRACKERS


def _progress(args: argparse.Namespace) -> bool:
    """Lightning's bars on a terminal only: in a log file they are thousands of redrawn lines."""
    return not args.no_progress and sys.stderr.isatty()


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
    from gemkd.experiments.teacher_fit import fit_teacher

    s = fit_teacher(args.config, args.data, args.out, strategy=args.strategy,
                    devices=args.devices, num_nodes=args.num_nodes, resume=args.resume,
                    progress=_progress(args), tracker=args.logger, stream=args.stream or None,
                    train_days=parse_days(args.train_days, "--train-days"),
                    continue_from=args.continue_from)
    if not s["is_global_zero"]:
        return
    ne = next(((k.split("/")[1], v) for k, v in s.get("val", {}).items()
               if k.startswith("ne/") and k.endswith("/all")), None)
    resumed = f" (resumed from {s['resumed_from']})" if s["resumed_from"] else ""
    val = f"; val NE {ne[0]} {ne[1]:.4f}" if ne is not None else ""
    print(f"trained {s['name']} to step {s['global_step']}{resumed}; "
          f"{s['examples_per_s']:.0f} examples/s{val}; run dir {args.out}")


def _export(args: argparse.Namespace) -> None:
    from gemkd.experiments.teacher_export import export_teacher

    m = export_teacher(args.ckpt, args.data, args.out, days=parse_days(args.days),
                       layer=args.layer, emb_dtype=args.emb_dtype, config=args.config,
                       batch_size=args.batch_size, devices=args.devices,
                       num_nodes=args.num_nodes, overwrite=args.overwrite,
                       progress=_progress(args))
    if m is not None:
        print(f"exported {m.total_rows} rows ({len(m.shards)} shards, layer {m.layer!r}, "
              f"{m.emb_dtype}) of teacher {m.teacher_name} {m.teacher_version[:12]} "
              f"to {args.out}")


def add_parser(sub) -> None:
    teacher = sub.add_parser("teacher", help="train and export teacher models")
    tsub = teacher.add_subparsers(dest="teacher_command", required=True)
    f = tsub.add_parser("fit", help="train a teacher with Lightning (resumable)")
    f.add_argument("--config", required=True,
                   help="YAML: model: {hparams} + trainer keys (experiments/teachers/*.yaml)")
    f.add_argument("--data", required=True, help="dataset directory")
    f.add_argument("--out", required=True, help="run directory (checkpoints, metrics.csv)")
    f.add_argument("--strategy", choices=STRATEGIES, default=None,
                   help="override the config's strategy")
    f.add_argument("--devices", type=int, default=None,
                   help="override the config's devices (processes per node)")
    f.add_argument("--num-nodes", type=int, default=None,
                   help="override the config's num_nodes (launch with torchrun or SLURM)")
    f.add_argument("--logger", choices=TRACKERS, default="csv",
                   help="experiment tracker: metrics.csv is always written; tensorboard "
                        "(RUN_DIR/logs/tensorboard) or mlflow (RUN_DIR/logs/mlruns, or "
                        "MLFLOW_TRACKING_URI) log the fit too (extras gemkd[tensorboard], "
                        "gemkd[mlflow])")
    f.add_argument("--resume", action="store_true",
                   help="continue from RUN_DIR/checkpoints/last.ckpt when it exists")
    f.add_argument("--stream", action="store_true",
                   help="one time-ordered pass over the training days with a checkpoint at "
                        "the end of every day (RUN_DIR/checkpoints/day=N.ckpt); the config's "
                        "max_epochs, select and patience become 1, last and none")
    f.add_argument("--train-days", default=None,
                   help="override the config's train_days (half-open A:B)")
    f.add_argument("--continue-from", default=None, metavar="CKPT",
                   help="continue an earlier run (its last.ckpt or a day=N.ckpt: weights and "
                        "optimizer state) on later days; --train-days must start after the "
                        "last day it trained on")
    f.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none when stderr is not a terminal)")
    f.set_defaults(func=_fit)

    e = tsub.add_parser("export", help="write a teacher's logits and embeddings to a store")
    e.add_argument("--ckpt", required=True, help="RUN_DIR/checkpoints/last.ckpt (or FSDP dir)")
    e.add_argument("--data", required=True, help="dataset directory")
    e.add_argument("--out", required=True, help="store directory to create")
    e.add_argument("--days", default=None, help="half-open day range A:B (default: all)")
    e.add_argument("--layer", default=None,
                   help="named representation to store (default: the config's repr_layer)")
    e.add_argument("--emb-dtype", choices=EMB_DTYPES, default=EMB_DTYPES[0])
    e.add_argument("--config", default=None,
                   help="teacher config (default: RUN_DIR/config.yaml beside the checkpoint)")
    e.add_argument("--batch-size", type=int, default=4096)
    e.add_argument("--devices", type=int, default=1, help="processes (DDP) per node")
    e.add_argument("--num-nodes", type=int, default=1, help="nodes (torchrun / SLURM)")
    e.add_argument("--overwrite", action="store_true", help="replace an existing store")
    e.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none when stderr is not a terminal)")
    e.set_defaults(func=_export)
