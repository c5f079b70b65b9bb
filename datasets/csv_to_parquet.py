"""Convert a folder's CSV files to zstd Parquet files that read back to the same CSV bytes.

Why: the logs shipped in ``datasets/`` are kept as Parquet (a quarter of the CSVs' size, read
several times faster, column by column) yet must stay the published data. So a file is written
only if ``pd.read_parquet(out).to_csv(index=False)`` reproduces its CSV byte for byte; each
file's sha256 (the CSV's, the one its PROVENANCE.md lists) is printed.

    python datasets/csv_to_parquet.py SRC_DIR OUT_DIR

Back to CSV: ``pd.read_parquet(path).to_csv(csv_path, index=False)``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

#: columns pandas would otherwise parse into something that does not write back the same:
#: zero-padded ids as text, an integer id column with gaps as nullable integers
DTYPES: dict[str, dict[str, str]] = {"links.csv": {"imdbId": "str", "tmdbId": "Int64"}}
#: no dictionary pages: smaller on every file but user_features (+4 %)
WRITE_OPTIONS = {"compression": "zstd", "compression_level": 22, "use_dictionary": False}


def as_csv(frame: pd.DataFrame) -> bytes:
    """The CSV text pandas writes for ``frame`` (the form the round-trip check compares)."""
    return frame.to_csv(index=False, lineterminator="\n").encode()


def convert(csv: Path, out: Path) -> tuple[int, str]:
    """Write ``csv`` as Parquet at ``out`` (atomically) if it reads back to the same bytes;
    returns its row count and the CSV's sha256."""
    data = csv.read_bytes()
    frame = pd.read_csv(csv, dtype=DTYPES.get(csv.name), low_memory=False)
    tmp = out.with_name(f".{out.name}.tmp")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp, **WRITE_OPTIONS)
    if as_csv(pd.read_parquet(tmp)) != data:
        tmp.unlink()
        raise SystemExit(f"{csv}: its Parquet copy does not write back the same CSV bytes "
                         "(add the column's dtype to DTYPES)")
    os.replace(tmp, out)
    return len(frame), hashlib.sha256(data).hexdigest()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path, help="folder of CSV files")
    p.add_argument("out", type=Path, help="folder for the Parquet files (made if absent)")
    args = p.parse_args(argv)
    csvs = sorted(args.src.glob("*.csv"))
    if not csvs:
        raise SystemExit(f"{args.src}: no *.csv files")
    args.out.mkdir(parents=True, exist_ok=True)
    print("| file | rows | CSV bytes | Parquet bytes | sha256 of the CSV |\n|---|---|---|---|---|")
    for csv in csvs:
        out = args.out / f"{csv.stem}.parquet"
        rows, digest = convert(csv, out)
        print(f"| {out.name} | {rows:,} | {csv.stat().st_size:,} | {out.stat().st_size:,} | "
              f"{digest} |")


if __name__ == "__main__":
    main()
