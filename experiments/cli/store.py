"""``gemkd store import``: predictions logged outside gemkd → a verified teacher store
(:func:`gemkd.transfer.store.importer.import_store`)."""

from __future__ import annotations

import argparse

from gemkd.experiments.cli.declare import Command, Opt, arguments
from gemkd.transfer.options import EMB_DTYPES


def _mapping(items: list[str]) -> dict[str, str] | None:
    """``["click=p_click"]`` → ``{"click": "p_click"}``; none given: None (``logit_<task>``)."""
    from gemkd.experiments.spec.load import parse_set

    return parse_set(items, "--logit-column", "TASK=COLUMN", as_yaml=False) or None


def _import(args: argparse.Namespace) -> None:
    from gemkd.transfer.store.importer import import_store

    m = import_store(**arguments(args))
    print(f"imported {m.total_rows} rows ({len(m.shards)} shards, tasks {m.tasks}, layer "
          f"{m.layer!r}) of teacher {m.teacher_name} to {args.out}")


COMMANDS = (
    Command(("store",), "teacher-output stores"),
    Command(("store", "import"), "a Parquet table of logged predictions -> a store", run=_import,
            calls="gemkd.transfer.store.importer:import_store", options=(
                Opt("--src", "Parquet file or directory: example_id, logit_<task> per task "
                    "[, emb] [, day, domain, user_id, ts]", required=True, param="src"),
                Opt("--out", "store directory to create", required=True, param="out"),
                Opt("--tasks", "comma-separated task names, e.g. click,like", required=True,
                    param="tasks", convert=lambda text: [t for t in text.split(",") if t]),
                Opt("--trained-until-day", "the last day the model was trained on (staleness "
                    "is measured from it)", type=int, required=True, param="trained_until_day"),
                Opt("--data", "the dataset the ids belong to (gives day, domain, user_id, ts "
                    "when the source has no such columns)", param="data"),
                Opt("--logit-column", "source column of a task's logit (default logit_<task>)",
                    many=True, metavar="TASK=COLUMN", param="logit_columns", convert=_mapping),
                Opt("--emb-column", "source column of the representation, if any (default emb)",
                    default="emb", param="emb_column"),
                Opt("--name", "teacher name in the manifest", default="external",
                    param="teacher_name"),
                Opt("--emb-dtype", "how the store keeps the representation", choices=EMB_DTYPES,
                    default=EMB_DTYPES[0], param="emb_dtype"),
                Opt("--overwrite", "replace an existing store", flag=True, param="overwrite"),
            )),
)
