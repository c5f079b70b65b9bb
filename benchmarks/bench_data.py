"""Data layer benchmark: synthetic generation time and reader rate vs a bare pyarrow scan.

    python -m benchmarks.bench_data [--config experiments/data/base.yaml] [--json OUT] [--quick]

Targets: 1M examples at mean history 50 generated in <= 60 s; the reader delivers
>= 0.5x the rate of a bare ``pyarrow.dataset`` scan of the same columns, and >= 200k
examples/s with one worker (num_workers=0: batches are built in the consuming process).
``--quick`` reads the tiny world (24k examples): the generation target is then not judged.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds

from benchmarks.common import (
    add_common_args,
    apply_common_args,
    figure,
    interleaved,
    print_figures,
    write_json,
)
from gemkd.transfer.config import load_dataclass
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.synth import SynthConfig, generate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", default=None,
                   help="world preset (default experiments/data/base.yaml; tiny with --quick)")
    p.add_argument("--batch-size", type=int, default=4096)
    add_common_args(p)
    args = p.parse_args()
    apply_common_args(p, args)
    config = args.config or f"experiments/data/{'tiny' if args.quick else 'base'}.yaml"

    cfg = load_dataclass(SynthConfig, config)
    t_start = time.perf_counter()
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
        t = interleaved({"reader": read_gemkd, "bare": read_bare}, args.repeats)
        t_reader, t_bare = t["reader"], t["bare"]

    results = {
        "examples": n,
        "generate_seconds": round(gen_s, 2),
        "generate_examples_per_s": round(n / gen_s),
        "reader_examples_per_s": round(n / t_reader),
        "bare_scan_examples_per_s": round(n / t_bare),
        "reader_vs_bare": round(t_bare / t_reader, 3),
        "columns": len(columns),
        "mean_history": round(events / n, 1),
        "total_seconds": round(time.perf_counter() - t_start, 1),
    }
    big = n >= 1_000_000
    figures = [
        figure(f"generate {n:,} examples (mean history {events / n:.1f})", gen_s, "s",
               "<= 60" if big else None, "" if big else "target is for >= 1M examples"),
        figure(f"reader, one worker, all {len(columns)} columns, batch {args.batch_size}",
               n / t_reader, "examples/s", ">= 200000"),
        figure("reader vs bare pyarrow.dataset scan of the same columns", t_bare / t_reader,
               "x", ">= 0.5"),
    ]
    print(f"data: {config}, median of {args.repeats} interleaved rounds after a warm-up")
    print_figures(figures)
    write_json(args.json, {"bench": "data", "quick": args.quick, "repeats": args.repeats,
                           **results, "figures": figures})


if __name__ == "__main__":
    main()
