"""Teacher-output store: export rate, join throughput, bytes per row (DESIGN §4).

The teacher's forward is excluded: outputs are synthetic arrays (``--rows`` rows, E=64 float32
embeddings, 3 tasks, 10 days, shuffled sparse example_ids), handed over in batches of 4096 as a
predict loop would.

1. Export: ``StoreWriter`` (batching, validation, finite checks, int8/fp16 conversion, per-shard
   sha256, dedupe scan, manifest) vs a bare ``pyarrow.parquet.write_table`` of the same arrays
   in one call, which still has to cast the embeddings (with the same torch cast) — once with
   pyarrow's default options, once with the store's options (no dictionary/statistics on float
   columns). Ratio = store rate / bare rate; target >= 0.8 against the tuned write.
2. Join: open a ``TeacherStore`` (sha256 verified, and once without), build a ``TeacherJoin``
   and look up every id (shuffled) in batches of 4096, vs a bare ``pyarrow.dataset`` read plus
   a single bulk ``Table.join`` of all ids — the strictest baseline, as a training loop cannot
   join its whole epoch at once (Arrow's hash join cannot carry fixed-size-list columns, so the
   bare ``+emb`` variant joins to a row index and ``take``s the embeddings). For scale, the
   per-batch bare alternative (one ``Table.join`` per batch, timed on 4 batches and
   extrapolated). Ratio = bare time / store time; target >= 0.5.
3. Bytes per row on disk for float16 vs int8 embeddings. The teacher store has no int4; int4
   exists for LoopFM codes, so the code store (``write_code_store``) is measured for int8 vs int4
   alongside, for codes of the embedding's width (E=64, per-element comparable) and of the
   quickstart's ``code_dim`` 8 (tanh codes of random values: incompressible, like real ones).

Each figure is the median of ``--reps`` interleaved runs after a warm-up on 50k rows. ``--quick``
uses 100k rows. Usage::

    python -m benchmarks.bench_store [--json OUT] [--rows N] [--reps R] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import torch

from benchmarks.common import figure, print_figures, write_json
from gemkd.transfer.repr_features import quantize_codes, write_code_store
from gemkd.transfer.store import StoreWriter, TeacherJoin, TeacherStore
from gemkd.transfer.store.store_writer import parquet_options, store_schema

TASKS = ["click", "conversion", "organic"]
E = 64
BATCH = 4096


def make_data(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "example_id": (rng.permutation(n).astype(np.int64) * 3 + 17),
        "day": np.sort(rng.integers(0, 10, n)),
        "domain": rng.integers(0, 4, n),
        "user_id": rng.integers(0, 200_000, n),
        "ts": rng.integers(1_700_000_000, 1_700_864_000, n),
        "logits": rng.standard_normal((n, len(TASKS)), dtype=np.float32),
        "emb": rng.standard_normal((n, E), dtype=np.float32),
    }


def timed(fns: dict[str, tuple], reps: int) -> dict[str, float]:
    """Median seconds per function over ``reps`` rounds.

    Each function is ``(run, cleanup)``; the functions of a comparison run interleaved, round
    by round, so a change in machine load (shared cores) hits both sides of a ratio alike.
    ``cleanup`` (or None) runs untimed after each call. Warm-up is the caller's (``warm_up``).
    """
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, (run, cleanup) in fns.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
            if cleanup:
                cleanup()
    return {k: statistics.median(v) for k, v in times.items()}


def warm_up(work: Path) -> None:
    """Run every measured path once on 50k rows: imports, thread pools, allocator, page cache."""
    small = make_data(50_000, seed=9)
    for dtype in ("float16", "int8"):
        export_store(small, work / f"warm-{dtype}", dtype)
        for emb in (False, True):
            store_join(work / f"warm-{dtype}", small["example_id"], emb)
    bare_write(small, work / "warm.parquet", {})
    bare_write(small, work / "warm.parquet", parquet_options("float16"))
    bare_join(work / "warm-float16", small["example_id"], True)
    bare_join(work / "warm-float16", small["example_id"], False)
    bare_join_batches(work / "warm-float16", small["example_id"], 1)


def export_store(data: dict, out: Path, emb_dtype: str) -> None:
    w = StoreWriter(out, tasks=TASKS, layer="trunk", emb_dim=E, emb_dtype=emb_dtype,
                    teacher_name="bench", teacher_version="0" * 64, trained_until_day=9)
    n = len(data["example_id"])
    for lo in range(0, n, BATCH):
        w.write(**{k: v[lo:lo + BATCH] for k, v in data.items()})
    w.finalize()


def bare_write(data: dict, out: Path, options: dict) -> None:
    emb = torch.from_numpy(data["emb"]).half().numpy()
    arrays = [pa.array(data["example_id"]), pa.array(data["day"].astype(np.int32)),
              pa.array(data["domain"].astype(np.int16)), pa.array(data["user_id"]),
              pa.array(data["ts"])]
    arrays += [pa.array(data["logits"][:, i]) for i in range(len(TASKS))]
    arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), E))
    table = pa.Table.from_arrays(arrays, schema=store_schema(TASKS, E, "float16"))
    pq.write_table(table, out, **options)


def store_join(path: Path, ids: np.ndarray, with_emb: bool, verify_sha: bool = True) -> None:
    join = TeacherJoin(TeacherStore(path, verify_sha=verify_sha), with_emb=with_emb)
    for lo in range(0, len(ids), BATCH):
        join(ids[lo:lo + BATCH])
    assert join.coverage == 1.0


def bare_join(path: Path, ids: np.ndarray, with_emb: bool) -> None:
    files = sorted(str(p) for p in path.glob("*.parquet"))
    logits = [f"logit_{t}" for t in TASKS]
    query = pa.table({"example_id": ids})
    if not with_emb:
        table = ds.dataset(files, format="parquet").to_table(columns=["example_id", *logits])
        out = query.join(table, "example_id")
    else:
        table = ds.dataset(files, format="parquet").to_table(columns=["example_id", *logits,
                                                                      "emb"])
        index = pa.table({"example_id": table.column("example_id"),
                          "row": pa.array(np.arange(table.num_rows))})
        hit = query.join(index, "example_id")
        out = table.take(hit.column("row"))
    assert out.num_rows == len(ids)


def bare_join_batches(path: Path, ids: np.ndarray, n_batches: int) -> None:
    """The per-batch bare alternative: one ``Table.join`` per batch of 4096 (logits only)."""
    files = sorted(str(p) for p in path.glob("*.parquet"))
    logits = [f"logit_{t}" for t in TASKS]
    table = ds.dataset(files, format="parquet").to_table(columns=["example_id", *logits])
    for k in range(n_batches):
        pa.table({"example_id": ids[k * BATCH:(k + 1) * BATCH]}).join(table, "example_id")


def code_store_bytes(data: dict, out: Path, code_dim: int, bits: int) -> tuple[float, float]:
    """(total, code column) bytes per row of a code store of tanh codes, one per row."""
    n = len(data["example_id"])
    codes = np.tanh(np.random.default_rng(2).standard_normal((n, code_dim), dtype=np.float32))
    write_code_store(out, data["example_id"], data["user_id"], data["ts"], data["day"],
                     quantize_codes(codes, bits), bits, code_dim, {"teacher_version": "bench"})
    f = out / "codes.parquet"
    meta = pq.read_metadata(f)
    code = sum(meta.row_group(rg).column(c).total_compressed_size
               for rg in range(meta.num_row_groups) for c in range(meta.num_columns)
               if meta.row_group(rg).column(c).path_in_schema == "code")
    return f.stat().st_size / n, code / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--rows", type=int, default=None, help="default 1M (100k with --quick)")
    ap.add_argument("--reps", "--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="100k rows")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = ap.parse_args()
    if args.reps < 5:
        ap.error("--reps must be at least 5")
    if args.threads:
        torch.set_num_threads(args.threads)
    args.rows = args.rows or (100_000 if args.quick else 1_000_000)
    data = make_data(args.rows)
    n = args.rows
    work = Path(tempfile.mkdtemp(prefix="bench_store-"))
    res: dict[str, float] = {}
    try:
        def rm(p: Path):
            return lambda: shutil.rmtree(p, ignore_errors=True) if p.is_dir() else \
                p.unlink(missing_ok=True)

        t0 = time.perf_counter()
        warm_up(work)
        bare = work / "bare.parquet"
        res |= timed({
            "export_store_float16_s": (lambda: export_store(data, work / "e16", "float16"),
                                       rm(work / "e16")),
            "export_store_int8_s": (lambda: export_store(data, work / "e8", "int8"),
                                    rm(work / "e8")),
            "export_bare_tuned_s": (lambda: bare_write(data, bare, parquet_options("float16")),
                                    rm(bare)),
            "export_bare_default_s": (lambda: bare_write(data, bare, {}), rm(bare)),
        }, args.reps)

        for dtype in ("float16", "int8"):
            export_store(data, work / f"store-{dtype}", dtype)
            files = list((work / f"store-{dtype}").glob("*.parquet"))
            res[f"bytes_per_row_{dtype}"] = sum(f.stat().st_size for f in files) / n
            emb_bytes = 0
            for f in files:
                meta = pq.read_metadata(f)
                for rg in range(meta.num_row_groups):
                    for c in range(meta.num_columns):
                        col = meta.row_group(rg).column(c)
                        if col.path_in_schema.startswith("emb"):
                            emb_bytes += col.total_compressed_size
            res[f"emb_bytes_per_row_{dtype}"] = emb_bytes / n

        for code_dim in (E, 8):
            for bits in (8, 4):
                total, col = code_store_bytes(data, work / f"codes-{code_dim}-{bits}", code_dim,
                                              bits)
                res[f"code_store_bytes_per_row_d{code_dim}_int{bits}"] = total
                res[f"code_bytes_per_row_d{code_dim}_int{bits}"] = col

        ids = np.random.default_rng(1).permutation(data["example_id"])
        s16, s8 = work / "store-float16", work / "store-int8"
        res |= timed({
            "join_store_s": (lambda: store_join(s16, ids, False), None),
            "join_store_nosha_s": (lambda: store_join(s16, ids, False, verify_sha=False), None),
            "join_bare_s": (lambda: bare_join(s16, ids, False), None),
            "join_store_emb_s": (lambda: store_join(s16, ids, True), None),
            "join_bare_emb_s": (lambda: bare_join(s16, ids, True), None),
            "join_store_int8_emb_s": (lambda: store_join(s8, ids, True), None),
            "join_bare_4batches_s": (lambda: bare_join_batches(s16, ids, 4), None),
        }, args.reps)
        res["join_bare_per_batch_s"] = res["join_bare_4batches_s"] / 4 * -(-n // BATCH)
        res["wall_s"] = time.perf_counter() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        ("export fp16: StoreWriter vs bare write_table (store opts)",
         res["export_store_float16_s"], res["export_bare_tuned_s"], 0.8),
        ("export fp16: StoreWriter vs bare write_table (defaults)",
         res["export_store_float16_s"], res["export_bare_default_s"], 0.8),
        ("export int8: StoreWriter vs bare fp16 write (store opts)",
         res["export_store_int8_s"], res["export_bare_tuned_s"], None),
        ("join logits: store (sha verified) vs bulk Table.join",
         res["join_store_s"], res["join_bare_s"], 0.5),
        ("join logits: store (verify_sha=False) vs bulk Table.join",
         res["join_store_nosha_s"], res["join_bare_s"], 0.5),
        ("join logits+fp16 emb: store vs bulk join + take",
         res["join_store_emb_s"], res["join_bare_emb_s"], 0.5),
        ("join logits: store vs Table.join per batch (extrapolated)",
         res["join_store_s"], res["join_bare_per_batch_s"], None),
    ]
    print(f"store benchmark: {n:,} rows, E={E}, {len(TASKS)} tasks, batch {BATCH}, "
          f"median of {args.reps} interleaved runs after a warm-up; torch threads "
          f"{torch.get_num_threads()}")
    print(f"{'comparison':58s} {'store s':>8s} {'bare s':>8s} {'ratio':>6s} {'target':>7s}")
    for name, ours_s, bare_s, target in rows:
        ratio = bare_s / ours_s  # >1: the store path is faster
        res[f"ratio::{name}"] = ratio
        mark = "" if target is None else (f">={target}" + (" ok" if ratio >= target else " MISS"))
        print(f"{name:58s} {ours_s:8.3f} {bare_s:8.3f} {ratio:6.2f} {mark:>7s}")
    print(f"{'rows/s exported: float16 / int8':58s} {n / res['export_store_float16_s']:>12,.0f}"
          f" / {n / res['export_store_int8_s']:,.0f}")
    print(f"{'rows/s joined (logits / +emb fp16 / +emb int8)':58s} "
          f"{n / res['join_store_s']:>12,.0f} / {n / res['join_store_emb_s']:,.0f} / "
          f"{n / res['join_store_int8_emb_s']:,.0f}")
    for d in ("float16", "int8"):
        print(f"{'bytes/row on disk, ' + d + ' emb (total / emb column)':58s} "
              f"{res[f'bytes_per_row_{d}']:8.1f} / {res[f'emb_bytes_per_row_{d}']:.1f}")
    for dim in (E, 8):
        label = f"bytes/row on disk, code store code_dim {dim} int8 / int4 (total)"
        print(f"{label:58s} "
              f"{res[f'code_store_bytes_per_row_d{dim}_int8']:8.1f} / "
              f"{res[f'code_store_bytes_per_row_d{dim}_int4']:.1f}")
    print(f"wall {res['wall_s']:.1f} s")
    figs = figures(res, rows, n)
    print_figures(figs)
    write_json(args.json, {"bench": "store", "quick": args.quick, "rows": n, "repeats": args.reps,
                           **res, "figures": figs})


def figures(res: dict, rows: list, n: int) -> list[dict]:
    """Ratios (>1: the store path is faster) with their targets, rates, bytes per row."""
    out = [figure(name, bare / ours, "x", None if t is None else f">= {t}")
           for name, ours, bare, t in rows]
    out.append(figure("store export rate, float16 emb (E=64)",
                      n / res["export_store_float16_s"], "rows/s"))
    out.append(figure("store join rate, logits only (sha verified, batches of 4096)",
                      n / res["join_store_s"], "rows/s"))
    for d in ("float16", "int8"):
        out.append(figure(f"teacher store bytes/row, {d} emb (E=64, 3 logits, keys)",
                          res[f"bytes_per_row_{d}"], "B"))
        out.append(figure(f"teacher store bytes/row, {d} emb column alone (E=64)",
                          res[f"emb_bytes_per_row_{d}"], "B"))
    for bits in (8, 4):
        out.append(figure(f"code store bytes/row, int{bits} code column alone (code_dim {E})",
                          res[f"code_bytes_per_row_d{E}_int{bits}"], "B"))
    for dim in (E, 8):
        for bits in (8, 4):
            out.append(figure(f"code store bytes/row, int{bits} codes (code_dim {dim}, keys)",
                              res[f"code_store_bytes_per_row_d{dim}_int{bits}"], "B"))
    return out


if __name__ == "__main__":
    main()
