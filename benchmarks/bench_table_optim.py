"""A GEM teacher's training step with its ID tables updated densely (AdamW, every row) against
row-wise (``rowwise_adagrad``, ``sparse_adam``: only the rows the batch looked up;
``gemkd.transfer.training.table_optim``), side by side in one process (interleaved rounds,
medians), on bench_teacher's typical world at batch 512.

    python -m benchmarks.bench_table_optim --threads 1 --models small,base --json perf/t.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.bench_teacher import TYPICAL, model_config
from benchmarks.common import (
    add_common_args,
    apply_common_args,
    figure,
    interleaved_times,
    print_figures,
    write_json,
)
from benchmarks.teacher_step_timing import Step, cycler, read_batches

RULES = ("dense_adamw", "rowwise_adagrad", "sparse_adam")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p, device=False)
    p.add_argument("--models", default="small", help="GEM configs, comma-separated")
    args = p.parse_args(argv)
    apply_common_args(p, args)
    from gemkd.transfer.data.synth import SynthConfig, generate

    models = args.models.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        schema = generate(SynthConfig(**TYPICAL), Path(tmp) / "world")
        batches = read_batches(Path(tmp) / "world", 2 if args.quick else 4)
    fns = {f"{m}/{r}": cycler(Step(schema, model_config(m), table_optimizer=r), batches)
           for m in models for r in RULES}
    times = interleaved_times(fns, repeats=max(args.repeats, 5) * 4, warmup=2, rotate=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    figures = []
    for m in models:
        for r in RULES:
            figures.append(figure(f"teacher step {m}, tables {r}, ms", 1000 * med[f"{m}/{r}"],
                                  "ms"))
            if r != "dense_adamw":
                figures.append(figure(f"teacher step {m}: dense_adamw / {r}",
                                      med[f"{m}/dense_adamw"] / med[f"{m}/{r}"], "x"))
    print_figures(figures)
    write_json(args.json, {"figures": figures, "seconds": med})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
