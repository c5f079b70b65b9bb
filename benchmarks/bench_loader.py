"""Training loader benchmark: rows/s of a teacher's loader alone, with 0, 1, 2 and 4 workers.

    python -m benchmarks.bench_loader [--config experiments/data/base.yaml] [--days 4]
        [--batch-size 2048] [--json OUT] [--quick]

What a GPU fit needs from its loader: the loader alone >= 200k rows/s with 4
DataLoader workers on the base world at batch 2,048 (a CPU figure). The loader is the teacher
fit's: ``AdsDataModule``'s training loader (shuffled, every column, whole histories), each pass
drained without a model. ``--days`` days of the base world are generated (a slice: the figure is
a rate; the whole world is 14 days); ``--quick`` one day.

Besides wall-clock rows/s, each configuration's CPU time per batch is measured apart: the
training process's (receiving batches: what one process must keep up with) and the workers'
together (reading, checking, cutting and handing over). On a machine with fewer free cores than
workers + 1 the wall figure is bounded by the cores, not the loader; the CPU figures say what it
would reach on free cores. The 4-worker loader is also run handing each batch over tensor by
tensor (``pack=False``, torch's default, as before one-buffer batches): the ratio is the
training process's cost per batch, side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import add_common_args, apply_common_args, figure, print_figures, write_json
from gemkd.transfer.config import load_dataclass
from gemkd.transfer.data.datamodule import AdsDataModule, EpochLoader
from gemkd.transfer.data.synth import SynthConfig, generate

WORKERS = (0, 1, 2, 4)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _pass(loader: EpochLoader) -> dict[str, float]:
    """One drained pass: wall seconds, this process's CPU seconds, the (exited) workers' CPU
    seconds, rows and batches."""
    children, cpu, t0 = _children_cpu(), time.process_time(), time.perf_counter()
    rows = batches = 0
    for batch in loader:
        rows += len(batch)
        batches += 1
    wall = time.perf_counter() - t0
    return {"wall": wall, "main_cpu": time.process_time() - cpu,
            "worker_cpu": _children_cpu() - children, "rows": rows, "batches": batches}


def _loader(data: Path, days: int, batch_size: int, workers: int, pack: bool = True
            ) -> EpochLoader:
    """A teacher fit's training loader (``pack=False``: its batches handed over tensor by
    tensor)."""
    dm = AdsDataModule(data, train_days=(0, days), batch_size=batch_size, num_workers=workers,
                       shuffle=True, seed=0, pin_memory=False)
    if pack:
        return dm.train_dataloader()  # type: ignore[return-value]
    return EpochLoader(dm.reader("train", shuffle=True), batch_size=None, num_workers=workers,
                       prefetch_factor=4 if workers else None, pack=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", default="experiments/data/base.yaml", help="world preset")
    p.add_argument("--days", type=int, default=None,
                   help="days of the world generated and read (default 4; 1 with --quick)")
    p.add_argument("--batch-size", type=int, default=2048)
    add_common_args(p)
    args = p.parse_args()
    apply_common_args(p, args)
    days = args.days or (1 if args.quick else 4)
    cfg = dataclasses.replace(load_dataclass(SynthConfig, args.config), n_days=days)

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        generate(cfg, data)
        runs = {f"{w}": _loader(data, days, args.batch_size, w) for w in WORKERS}
        runs["4-per-tensor"] = _loader(data, days, args.batch_size, 4, pack=False)
        for loader in runs.values():  # warm-up: the files in the page cache, imports done
            _pass(loader)
        seen: dict[str, list[dict[str, float]]] = {k: [] for k in runs}
        for _ in range(args.repeats):  # interleaved rounds: load drifts hit every loader
            for key, loader in runs.items():
                seen[key].append(_pass(loader))

    def med(key: str, what: str) -> float:
        return statistics.median(r[what] for r in seen[key])

    rows, batches = seen["0"][0]["rows"], seen["0"][0]["batches"]
    assert all(r["rows"] == rows for v in seen.values() for r in v)
    per: dict[str, dict[str, float]] = {}
    for key in runs:
        per[key] = {"rows_per_s": rows / med(key, "wall"),
                    "main_cpu_ms_per_batch": 1e3 * med(key, "main_cpu") / batches,
                    "worker_cpu_ms_per_batch": 1e3 * med(key, "worker_cpu") / batches}
    four, plain = per["4"], per["4-per-tensor"]
    # on free cores: 4 workers share the reading, one process receives every batch
    bound_ms = max(four["worker_cpu_ms_per_batch"] / 4, four["main_cpu_ms_per_batch"])
    cpu_bound = 1e3 * args.batch_size / bound_ms
    figures = [figure(f"{w} worker{'s' if w != 1 else ''}, batch {args.batch_size}, every "
                      f"column, shuffled", per[f"{w}"]["rows_per_s"], "rows/s",
                      ">= 200000" if w == 4 else None,
                      "" if w else "read in the training process")
               for w in WORKERS]
    figures += [
        figure("4 workers: their CPU per batch (read, check, cut, hand over)",
               four["worker_cpu_ms_per_batch"], "ms"),
        figure("4 workers: training process's CPU per batch (receive one buffer)",
               four["main_cpu_ms_per_batch"], "ms"),
        figure("4 workers: training process's CPU per batch, tensor by tensor ÷ one buffer",
               plain["main_cpu_ms_per_batch"] / four["main_cpu_ms_per_batch"], "x"),
        figure("4 workers on 5 free cores, from the CPU per batch (workers ÷ 4 vs the training "
               "process)", cpu_bound, "rows/s", None,
               "a bound from CPU time, not a wall-clock rate"),
    ]
    print(f"loader: {args.config}, {days} day(s), {rows:,} rows, batch {args.batch_size}; "
          f"median of {args.repeats} interleaved rounds after a warm-up")
    print_figures(figures)
    write_json(args.json, {"bench": "loader", "quick": args.quick, "repeats": args.repeats,
                           "rows": rows, "batches": batches, "days": days,
                           "batch_size": args.batch_size, "per_workers": per,
                           "total_seconds": round(time.perf_counter() - t_start, 1),
                           "figures": figures})


if __name__ == "__main__":
    main()
