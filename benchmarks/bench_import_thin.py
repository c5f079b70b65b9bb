"""Import of a thin log: CPU seconds of ``gemkd data import`` on ~90k rows over ~6,000 calendar
days (``benchmarks.thin_log``: ~72k users, most with one event), beside the same rows on 9 days.

    python -m benchmarks.bench_import_thin [--quick] [--repeats N] [--tree DIR] [--json OUT]

Each import is a fresh process (``common.run_child``: user + system CPU seconds, so other jobs
on the machine do not count). The streaming import's second pass works a group of consecutive
dates at a time, not a date at a time, so a thin log costs about what the same rows on a few
days cost, plus a day partition (a folder and a Parquet file) per calendar day. Targets: the
thin log imports in <= 10 CPU s, and each calendar day beyond the 9 costs <= 1.5 ms of CPU (a
date at a time, each merging every user's carried history, it cost ~3.8 ms, growing with the
users). ``--tree`` runs the import of another checkout (e.g. one before the change) for a
side-by-side.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import yaml

from benchmarks.common import (
    add_common_args,
    apply_common_args,
    figure,
    print_figures,
    run_child,
    write_json,
)
from benchmarks.thin_log import MAPPING, thin_frame

ROOT = Path(__file__).resolve().parents[1]


def _import_cpu(src: Path, mapping: Path, out: Path, repeats: int, tree: Path
                ) -> tuple[float, str]:
    """Median CPU seconds of ``repeats`` imports (each a fresh process importing gemkd from
    ``tree``), and the last one's summary line."""
    argv = ["-m", "gemkd.experiments.cli", "data", "import", "--src", str(src), "--mapping",
            str(mapping), "--out", str(out), "--overwrite"]
    runs = [run_child(argv, f"import {src}", tree=tree, cwd=out.parent)
            for _ in range(repeats)]
    return statistics.median(r.cpu_seconds for r in runs), runs[-1].stdout.splitlines()[-1]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, default=ROOT,
                   help="import with the gemkd of this checkout instead of this one")
    add_common_args(p)  # --quick: 9k rows over 2 years; --repeats: imports of each log
    a = p.parse_args(argv)
    apply_common_args(p, a)
    rows, users, years = (9_000, 7_200, 2.0) if a.quick else (90_000, 72_000, 17.0)
    frame = thin_frame(rows, users, 2_400, years)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        mapping = root / "mapping.yaml"
        mapping.write_text(yaml.safe_dump(MAPPING))
        thin, dense = root / "thin.csv", root / "dense.csv"
        frame.to_csv(thin, index=False)
        days = int(np.unique(frame["time"] // 86_400).size)
        t0 = int(frame["time"].iloc[0]) // 86_400 * 86_400  # the same rows, squeezed into 9 days
        squeezed = frame.assign(time=t0 + (frame["time"] - t0) * (9 * 86_400 - 1)
                                // max(int(frame["time"].iloc[-1]) - t0, 1))
        squeezed.to_csv(dense, index=False)
        tree = a.tree.resolve()
        thin_s, thin_line = _import_cpu(thin, mapping, root / "ds_thin", a.repeats, tree)
        dense_s, dense_line = _import_cpu(dense, mapping, root / "ds_dense", a.repeats, tree)
    print(f"thin: {thin_line}\ndense: {dense_line}")
    figures = [
        figure(f"import a thin log ({rows:,} rows, {users:,} users, {days:,} calendar days), "
               "CPU seconds", thin_s, "s", None if a.quick else "<= 10"),
        figure("the same rows on 9 days, CPU seconds", dense_s, "s"),
        figure("thin log vs the same rows on 9 days (CPU seconds)", thin_s / dense_s, "x"),
        figure("CPU per calendar day beyond the 9-day import (a day's Parquet file)",
               1000 * (thin_s - dense_s) / days, "ms", None if a.quick else "<= 1.5"),
    ]
    print(f"import of a thin log, median of {a.repeats} fresh processes"
          + (f" (gemkd of {a.tree})" if a.tree.resolve() != ROOT else ""))
    print_figures(figures)
    write_json(a.json, {"bench": "import_thin", "quick": a.quick, "repeats": a.repeats,
                        "tree": str(a.tree.resolve()), "figures": figures})


if __name__ == "__main__":
    main()
