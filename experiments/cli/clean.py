"""``gemkd clean PATH``: remove what killed writers left, never what a live one is building."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gemkd.experiments.cli.declare import Command, Opt, arguments


def stale_staging(path: str | Path) -> list[Path]:
    """Remove the staging directories of ``path`` (beside it) and of everything under it that
    no live process holds; returns them."""
    from gemkd.transfer.io.atomic import sweep_staging

    path = Path(path)
    removed = sweep_staging(path.parent, path.name)
    if path.is_dir():
        for root, dirs, _ in os.walk(path):
            removed += sweep_staging(root)
            dirs[:] = [d for d in dirs if ".tmp-" not in d]  # never descend into staging
    return removed


def _clean(args: argparse.Namespace) -> None:
    removed = stale_staging(**arguments(args))
    for p in removed:
        print(f"removed {p}")
    print(f"{len(removed)} stale staging director{'y' if len(removed) == 1 else 'ies'} "
          f"removed under {args.path}")


COMMANDS = (
    Command(("clean",), "remove the hidden staging directories killed exports left "
            "(.NAME.tmp-*), never one a live process is writing", run=_clean,
            calls="gemkd.experiments.cli.clean:stale_staging", options=(
                Opt("path", "a store, dataset or run directory (its staging siblings and "
                    "everything under it are swept)", param="path"),
            )),
)
