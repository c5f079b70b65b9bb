"""What a dataset's checksums cost: the check ``gemkd run`` makes before it reads a dataset
(``audit.check_days`` over every day: each part's sha256, rows per day, unique ``example_id``),
the sha256 alone, and a read of every column with and without Parquet page checksum
verification (docs/notes/2026-12-06-integrity.md)::

    python -m benchmarks.bench_integrity --data RUN_DIR/cache/data-*/data

Times are the best of ``--repeat`` passes (the files in the page cache: what a run that just
made or used its dataset sees).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from gemkd.transfer.data.audit import check_days
from gemkd.transfer.data.part_digests import digest_parts
from gemkd.transfer.data.schema import DatasetSchema


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def read_all(files: list[Path], verify: bool) -> None:
    for f in files:
        pq.ParquetFile(f, page_checksum_verification=verify).read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="a gemkd dataset directory")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    schema = DatasetSchema.load(a.data)
    if not schema.part_sha256:
        raise SystemExit(f"{a.data}: no part digests (a dataset of an older gemkd): "
                         "regenerate it, or copy it and re-save its schema.json")
    files = sorted(a.data.glob("day=*/part-*.parquet"))
    size = sum(f.stat().st_size for f in files)
    days = (min(schema.days), max(schema.days) + 1)
    print(f"{a.data}: {schema.n_rows:,} rows, {len(files)} part files, {size / 2**20:.1f} MiB")
    print(f"  gemkd run's check (check_days, every day): "
          f"{best(lambda: check_days(a.data, days), a.repeat):.3f} s")
    print(f"  sha256 of every part:                      "
          f"{best(lambda: digest_parts(a.data, schema.days), a.repeat):.3f} s")
    plain = best(lambda: read_all(files, False), a.repeat)
    checked = best(lambda: read_all(files, True), a.repeat)
    print(f"  read every column: {plain:.3f} s, with page checksums verified {checked:.3f} s "
          f"({(checked / plain - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
