"""Data layer benchmark: synthetic generation time and reader rate vs a bare pyarrow scan.

    python benchmarks/bench_data.py [--config experiments/data/base.yaml] [--json OUT]

Targets (issue 2): 1M examples at mean history 50 generated in <= 60 s; the reader delivers
>= 0.5x the rate of a bare ``pyarrow.dataset`` scan of the same columns, and >= 200k
examples/s with one worker (num_workers=0: batches are built in the consuming process).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import median_seconds, write_json  # noqa: E402
from transfer.config import load_dataclass  # noqa: E402
from transfer.data.reader import DatasetReader  # noqa: E402
from transfer.data.synth import SynthConfig, generate  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", default="experiments/data/base.yaml")
    p.add_argument("--json", default=None)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=4096)
    args = p.parse_args()

    cfg = load_dataclass(SynthConfig, args.config)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "data"
        t0 = time.perf_counter()
        schema = generate(cfg, out)
        gen_s = time.perf_counter() - t0
        reader = DatasetReader(out, batch_size=args.batch_size)
        files = sorted({str(u.path) for u in reader.units})
        columns = reader.columns

        def read_gemkd() -> int:
            return sum(len(b) for b in reader)

        def read_bare() -> int:
            d = ds.dataset(files, format="parquet")
            return sum(rb.num_rows for rb in d.to_batches(columns=columns,
                                                           batch_size=args.batch_size))

        n = schema.n_rows
        events = sum(int(b.seq_offsets[-1]) for b in reader)
        assert read_gemkd() == n == read_bare()
        t_reader = median_seconds(read_gemkd, args.repeats)
        t_bare = median_seconds(read_bare, args.repeats)

    results = {
        "examples": n,
        "generate_seconds": round(gen_s, 2),
        "generate_examples_per_s": round(n / gen_s),
        "reader_examples_per_s": round(n / t_reader),
        "bare_scan_examples_per_s": round(n / t_bare),
        "reader_vs_bare": round(t_bare / t_reader, 3),
        "columns": len(columns),
        "mean_history": round(events / n, 1),
    }
    print(f"generate {n:,} examples (mean history {events / n:.1f}): {gen_s:.1f} s "
          f"(target <= 60 s)")
    print(f"reader   {n / t_reader:>12,.0f} examples/s  (target >= 200,000)")
    print(f"bare     {n / t_bare:>12,.0f} examples/s  pyarrow.dataset scan, same {len(columns)} "
          "columns")
    print(f"ratio    {t_bare / t_reader:.2f}x  (target >= 0.5x)")
    write_json(args.json, {"bench": "data", **results})


if __name__ == "__main__":
    main()
