"""The students' as-of index of the LoopFM codes as the log gets longer (more days, the same
traffic a day): peak memory of ``AsOfCodes`` over a student's last days, scoped (``days``) and
whole, each in a fresh process.

``bench_scale`` grows its worlds by rows a day over a fixed 14 days, so a student's own days
grow with them; this isolates the log's length. Code stores: ``--users`` users, ``--per-day``
rows a day over each ``--days`` count, Zipf-distributed activity, random int8 codes of width 8,
written by the streamed writer. Each child opens the index for the last 5 days and looks up every
row of them in batches of 1,024 (``lookup_mean``); the writer's own peak is reported as
``write``. Usage::

    python -m benchmarks.bench_asof_days [--days 10,20,40] [--per-day 100000] [--users 20000]
        [--work DIR] [--json OUT] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

STUDENT_DAYS, SECONDS_A_DAY = 5, 86_400


def _make(out: Path, days: int, per_day: int, users: int) -> None:
    import numpy as np

    from gemkd.transfer.repr_features.code_sort import write_code_store_streamed

    rng = np.random.default_rng(days)

    def chunks():
        for d in range(days):
            ts = np.sort(rng.integers(0, SECONDS_A_DAY, per_day)) + d * SECONDS_A_DAY
            uid = (rng.zipf(1.3, per_day) * 7919) % users
            eid = np.arange(per_day, dtype=np.int64) + d * per_day
            yield (eid, uid, ts, np.full(per_day, d, np.int32),
                   rng.integers(-127, 128, (per_day, 8)).astype(np.int8))

    write_code_store_streamed(out, chunks(), 8, 8, {"teacher_version": "0" * 64})


def _lookups(codes: Path, days: int, scoped: bool) -> None:
    import torch

    from gemkd.transfer.repr_features import AsOfCodes, CodeStore

    torch.set_num_threads(1)
    store = CodeStore(codes)
    scope = (days - STUDENT_DAYS, days)
    asof = AsOfCodes(store, 50, days=scope if scoped else None)
    found = 0
    for table in store.iter_row_groups(["user_id", "ts", "day"]):
        mine = table.column("day").to_numpy() >= scope[0]
        uid, ts = table.column("user_id").to_numpy()[mine], table.column("ts").to_numpy()[mine]
        for lo in range(0, len(uid), 1024):
            found += int((asof.lookup_mean(uid[lo:lo + 1024], ts[lo:lo + 1024]) != 0)
                         .any(1).sum())
    print(json.dumps({"kept": len(asof), "rows": store.num_rows, "found": found}))


def _run(args: list[str]) -> tuple[dict, float, float]:
    """A child's printed JSON, wall seconds and peak RSS (MB)."""
    from benchmarks.common import run_child

    r = run_child(["-m", "benchmarks.bench_asof_days", *args], f"child {args}")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}, r.seconds, r.peak_mb


def main() -> None:
    from benchmarks.common import add_common_args, apply_common_args, write_json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    p.add_argument("--days", default="10,20,40")
    p.add_argument("--per-day", type=int, default=100_000)
    p.add_argument("--users", type=int, default=20_000)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--codes", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--n-days", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child == "make":
        _make(args.codes, args.n_days, args.per_day, args.users)
        return
    if args.child in ("scoped", "whole"):
        _lookups(args.codes, args.n_days, args.child == "scoped")
        return
    apply_common_args(p, args)
    counts = [5, 10] if args.quick else [int(x) for x in args.days.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        for n in counts:
            codes = work / f"codes-{n}d-{args.per_day}-{args.users}"
            common = ["--codes", str(codes), "--n-days", str(n), "--per-day",
                      str(args.per_day), "--users", str(args.users)]
            if not (codes / "codes.json").is_file():  # the streamed writer's peak, too
                _, secs, peak = _run(["--child", "make", *common])
                rows.append({"days": n, "index": "write", "rows": n * args.per_day,
                             "seconds": round(secs, 1), "peak_mb": round(peak, 1)})
                print(json.dumps(rows[-1]), flush=True)
            for kind in ("whole", "scoped"):
                got, secs, peak = _run(["--child", kind, *common])
                rows.append({"days": n, "index": kind, **got, "seconds": round(secs, 1),
                             "peak_mb": round(peak, 1)})
                print(json.dumps(rows[-1]), flush=True)
    write_json(args.json, {"bench": "asof_days", "per_day": args.per_day,
                           "users": args.users, "rows": rows})


if __name__ == "__main__":
    main()
