"""One streamed teacher day, this checkout against another (e.g. an older commit's), side by
side on the same machine: the seconds a day of the shipped streaming teacher costs.

    git -C . archive 75ec439 | tar -x -C /tmp/before
    python -m benchmarks.bench_stream_trees --before /tmp/before [--rows 75000] [--repeats 5]
        [--json OUT] [--threads 1]

Each checkout streams day 0 of a world of the base preset's knobs (``--rows`` impressions; each
checkout generates its own, the same config and seed) with its own
``benchmarks.bench_teacher_stream`` recipe ``after`` (the streaming teacher
experiments/benchmark.yaml ships, built as that checkout's ``gemkd run`` builds it) and its own
phase timer, in a fresh process per fit. Rounds alternate which checkout goes first, after one
untimed warm-up round; the figure is the median of the rounds' own ratios (steadier against a
shared machine's drift than a ratio of medians) and both medians. ``day_seconds`` is the fit's
loop less its final ``last.ckpt`` (the day's own checkpoint included): what each day of a
stream costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys
from pathlib import Path
import torch
torch.set_num_threads(int(sys.argv[4]))
from benchmarks import bench_teacher_stream as b
b.quiet_lightning()
data, out, rows = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
if not (data / "schema.json").is_file():
    b.world(data, rows)
    print(json.dumps({}))
else:
    print(json.dumps(b.one_day(b.Candidate(b.shipped_config()), data, out)))
"""


def child(tree: Path, data: Path, out: Path, rows: int, threads: int) -> dict[str, float]:
    """One fit (or the world, when ``data`` is not there yet) with ``tree``'s gemkd."""
    from benchmarks.common import run_child

    r = run_child(["-c", CHILD, str(data), str(out), str(rows), str(threads)],
                  f"{tree}: the streamed day", tree=tree, cwd=tree, threads=threads)
    # the process's CPU seconds: at one thread, what the work costs whatever else the machine
    # runs (its wall time is not)
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "cpu_seconds": r.cpu_seconds}


def main() -> None:
    from benchmarks.common import (
        add_common_args,
        apply_common_args,
        figure,
        print_figures,
        write_json,
    )

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    p.add_argument("--before", type=Path, required=True,
                   help="the other checkout (e.g. `git archive 75ec439` extracted)")
    p.add_argument("--rows", type=int, default=75_000,
                   help="impressions in the streamed day (default: the base preset's)")
    args = p.parse_args()
    apply_common_args(p, args)
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    rows = 5_000 if args.quick else args.rows
    rounds = args.repeats
    trees = {"before": args.before.resolve(), "this tree": ROOT}
    t_start = time.perf_counter()
    times: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as tmp:
        worlds = {k: Path(tmp) / f"world-{i}" for i, k in enumerate(trees)}
        for k, tree in trees.items():
            child(tree, worlds[k], Path(tmp), rows, threads)
        for r in range(rounds + 1):
            order = list(trees) if r % 2 else list(reversed(trees))
            for k in order:
                row = child(trees[k], worlds[k], Path(tmp) / f"{k}-{r}".replace(" ", "_"),
                            rows, threads)
                if r:
                    times[k].append(row)
                print(f"  round {r}{' (warm-up)' if not r else ''} {k}: "
                      f"{row['day_seconds']:.1f} s/day, {row['cpu_seconds']:.1f} CPU s",
                      flush=True)
    before = [t["day_seconds"] for t in times["before"]]
    after = [t["day_seconds"] for t in times["this tree"]]
    paired = statistics.median(b / a for b, a in zip(before, after, strict=True))
    cpu_b = [t["cpu_seconds"] for t in times["before"]]
    cpu_a = [t["cpu_seconds"] for t in times["this tree"]]
    cpu_paired = statistics.median(b / a for b, a in zip(cpu_b, cpu_a, strict=True))
    figures = [
        figure("streamed day (before)", round(statistics.median(before), 2), "s"),
        figure("streamed day (this tree)", round(statistics.median(after), 2), "s"),
        figure("streamed day speed-up (median of rounds' ratios)", round(paired, 3), "x",
               ">= 1.5", note=f"{rows:,} rows, {rounds} rounds"),
        figure("fit's CPU seconds, before ÷ this tree (median of rounds' ratios)",
               round(cpu_paired, 3), "x", note="the whole fit process: setup included"),
    ]
    print_figures(figures)
    write_json(args.json, {"bench": "stream_trees", "rows": rows, "rounds": rounds,
                           "before": str(trees["before"]), "times": times,
                           "figures": figures,
                           "total_seconds": round(time.perf_counter() - t_start, 1)})


if __name__ == "__main__":
    main()
