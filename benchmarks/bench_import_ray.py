"""``gemkd data import`` on one machine against ``--engine ray``: wall time of
each, alternated in one process on one local Ray instance (started once, ``--cpus`` CPUs, so
its start is not timed), medians over ``--repeat``, and whether the two datasets are the same
bytes. The log: ``benchmarks.import_log``'s (one CSV), and the same rows as
Parquet files by day with ``--files`` (what a scan spreads over tasks). Usage::

    python -m benchmarks.import_log --rows 1000000 --out /tmp/log_1m
    python -m benchmarks.bench_import_ray --log /tmp/log_1m [--cpus 2] [--repeat 3]
        [--files] [--json OUT]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from gemkd.transfer.data.importer import import_logs, load_mapping
from gemkd.transfer.options import ImportEngine
from gemkd.transfer.ray_cluster import kept_handlers

ENGINES: tuple[ImportEngine, ...] = ("local", "ray")


def as_parquet_days(log: Path, out: Path) -> Path:
    """``log``'s events as one Parquet file per day (its side table and mapping beside)."""
    out.mkdir(parents=True, exist_ok=True)
    df = pd.read_csv(log / "events.csv")
    day = (df["time"] - df["time"].min()) // 86_400
    for d, part in df.groupby(day, sort=True):
        part.to_parquet(out / f"events-{d:04d}.parquet", index=False)
    shutil.copy(log / "items.csv", out / "items.csv")
    mapping = yaml.safe_load((log / "mapping.yaml").read_text())
    mapping["files"] = ["events*.parquet"]
    (out / "mapping.yaml").write_text(yaml.safe_dump(mapping, sort_keys=False))
    return out


def same_bytes(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        filecmp.cmp(a / f, b / f, shallow=False) for f in files)


def measure(log: Path, repeat: int, work: Path) -> dict:
    mapping = load_mapping(log / "mapping.yaml")
    seconds: dict[str, list[float]] = {e: [] for e in ENGINES}
    for _ in range(repeat):
        for engine in ENGINES:
            started = time.perf_counter()
            import_logs(log, mapping, work / engine, overwrite=True, engine=engine)
            seconds[engine].append(time.perf_counter() - started)
    medians = {e: statistics.median(v) for e, v in seconds.items()}
    return {"log": str(log), "seconds": seconds, "median_s": medians,
            "ray_over_local": medians["ray"] / medians["local"],
            "same_bytes": same_bytes(work / "local", work / "ray")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", type=Path, required=True, help="a benchmarks.import_log folder")
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--files", action="store_true", help="also the log as Parquet files by day")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    import ray

    with kept_handlers():
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench_import_ray-") as tmp:
            logs = [args.log]
            if args.files:
                logs.append(as_parquet_days(args.log, Path(tmp) / "parquet_days"))
            for log in logs:
                r = measure(log, args.repeat, Path(tmp))
                r["cpus"] = args.cpus
                results.append(r)
                print(f"{log}: local {r['median_s']['local']:.2f} s, ray "
                      f"{r['median_s']['ray']:.2f} s (median of {args.repeat}, {args.cpus} "
                      f"CPUs; ray/local {r['ray_over_local']:.2f}); same bytes: "
                      f"{r['same_bytes']}")
    finally:
        ray.shutdown()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
