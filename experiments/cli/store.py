"""``gemkd store import``: predictions logged outside gemkd → a verified teacher store
(:func:`gemkd.transfer.store.importer.import_store`)."""

from __future__ import annotations

import argparse

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import EMB_DTYPES


def _mapping(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        task, sep, column = item.partition("=")
        if not sep or not task or not column:
            raise ConfigError(f"--logit-column {item!r}: expected TASK=COLUMN")
        out[task] = column
    return out


def _import(args: argparse.Namespace) -> None:
    from gemkd.transfer.store.importer import import_store

    tasks = [t for t in args.tasks.split(",") if t]
    m = import_store(args.src, args.out, tasks, trained_until_day=args.trained_until_day,
                     data=args.data, logit_columns=_mapping(args.logit_column),
                     emb_column=args.emb_column, teacher_name=args.name,
                     emb_dtype=args.emb_dtype, overwrite=args.overwrite)
    print(f"imported {m.total_rows} rows ({len(m.shards)} shards, tasks {m.tasks}, layer "
          f"{m.layer!r}) of teacher {m.teacher_name} to {args.out}")


def add_parser(sub) -> None:
    store = sub.add_parser("store", help="teacher-output stores")
    ssub = store.add_subparsers(dest="store_command", required=True)
    i = ssub.add_parser("import", help="a Parquet table of logged predictions -> a store")
    i.add_argument("--src", required=True, help="Parquet file or directory: example_id, "
                   "logit_<task> per task [, emb] [, day, domain, user_id, ts]")
    i.add_argument("--out", required=True, help="store directory to create")
    i.add_argument("--tasks", required=True, help="comma-separated task names, e.g. click,like")
    i.add_argument("--trained-until-day", type=int, required=True,
                   help="the last day the model was trained on (staleness is measured from it)")
    i.add_argument("--data", default=None,
                   help="the dataset the ids belong to (gives day, domain, user_id, ts when the "
                        "source has no such columns)")
    i.add_argument("--logit-column", action="append", default=[], metavar="TASK=COLUMN",
                   help="source column of a task's logit (default logit_<task>)")
    i.add_argument("--emb-column", default="emb",
                   help="source column of the representation, if any (default emb)")
    i.add_argument("--name", default="external", help="teacher name in the manifest")
    i.add_argument("--emb-dtype", choices=EMB_DTYPES, default=EMB_DTYPES[0])
    i.add_argument("--overwrite", action="store_true", help="replace an existing store")
    i.set_defaults(func=_import)
