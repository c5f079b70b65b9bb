"""The store side of the data path as the log grows: peak memory and time of the student's join,
the LoopFM codes step, ``summary`` and ``validate`` on synthetic worlds of growing size.

Worlds: experiments/data/small.yaml scaled to ``--rows`` impressions over its 14 days (users
scaled alike: the preset's density). Store: the world's rows with random logits and width-128
float16 embeddings (the small teacher's trunk), written by ``StoreWriter`` (row groups of 65,536
rows) — the teacher's forward is not what is measured. Steps, each in a fresh process whose peak
RSS (``ru_maxrss`` of ``wait4``, what ``/usr/bin/time -v`` reports) and wall time are taken:

- ``join``: the student's teacher join with embeddings, every row of its days (the last 5) and
  domain (0) looked up in time order in batches of 1,024, as ``Inputs.teacher`` builds it
  (``StreamJoin`` scoped to the student; a tree without it: ``TeacherJoin`` of the whole store);
- ``codes``: ``build_codes`` (window: the first 9 days, ``code_dim`` 8, 1 epoch);
- ``summary``: ``summarize`` and ``impressions_per_user`` (``gemkd data summary`` without the
  two-day feature oracle);
- ``validate``: ``validate_dataset`` (``gemkd data validate``);
- ``import``: ``gemkd data import`` (streamed) of ``benchmarks/import_log.py``'s generated event
  log of the same number of rows (125,000 a day, 20,000 users, 100-event histories), the log
  written once beside the world;
- ``export``: a teacher's export over the whole world into a store (``export_model`` of the tiny
  GEM with its initial weights, batch 4,096, float16 trunk embeddings): the predict loop and the
  store writer, not a trained model's numbers;
- ``reader``: a ``DatasetReader`` pass over every row alone (batches of 4,096, each dropped once
  made, as ``validate`` consumes them);
- ``asof``: the student's as-of index of the LoopFM codes (``AsOfCodes``, max_events 50; scoped
  to the student's days where the tree has ``days``, else the whole code store) and its pooled
  codes for every row of its days and domain in batches of 1,024. The code store (random 8-byte
  codes of every store row) is made once per size by this tree;
- ``codewrite``: the codes step's write alone: random codes of every store row into a code
  store (a tree without ``code_sort``: every row's keys and code held, then ``write_code_store``,
  as its codes step did).

``--before TREE`` measures the same steps with another checkout's gemkd (e.g. main's) in the same
run. Figures per step: the peak's growth per row (least squares over the sizes), the peak at the
largest size, and the rows at which the peak would reach 24 GB. Usage::

    python -m benchmarks.bench_scale [--json OUT] [--rows 250000,500000,1000000]
        [--before /path/to/other/checkout] [--work DIR] [--quick] [--threads 1]
"""

from __future__ import annotations

import argparse
import importlib
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("import", "summary", "validate", "reader", "export", "join", "codes", "codewrite",
         "asof")
SMALL_ROWS, SMALL_USERS, DAYS, STUDENT_DAYS, WINDOW = 280_000, 1300, 14, 5, 9
EMB = 128
LIMIT = 24 * 2**30


# ---- children: one step each, in a fresh process -----------------------------------------------
def _make_world(out: Path, rows: int) -> None:
    from gemkd.transfer.config import load_dataclass
    from gemkd.transfer.data.synth import SynthConfig, generate

    scale = rows / SMALL_ROWS
    cfg = load_dataclass(SynthConfig, ROOT / "experiments/data/small.yaml",
                         {"examples_per_day": rows // DAYS,
                          "n_users": max(50, round(SMALL_USERS * scale))})
    generate(cfg, out)


def _reader_class() -> type:
    """``DatasetReader``, from this checkout or (``--before``) one before its module's rename."""
    try:
        from gemkd.transfer.data.dataset_reader import DatasetReader
    except ImportError:
        return importlib.import_module("gemkd.transfer.data.reader").DatasetReader
    return DatasetReader


def _make_store(data: Path, out: Path) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    from gemkd.transfer.store import StoreWriter

    DatasetReader = _reader_class()

    reader = DatasetReader(data, batch_size=1)
    tasks = list(reader.schema.tasks)
    rng = np.random.default_rng(0)
    keys = ["example_id", "day", "domain", "user_id", "ts"]
    with StoreWriter(out, tasks=tasks, layer="trunk", emb_dim=EMB, emb_dtype="float16",
                     teacher_name="bench", teacher_version="0" * 64,
                     trained_until_day=WINDOW - 1) as w:
        for u in reader.units:
            t = pq.ParquetFile(u.path).read_row_group(u.row_group, columns=keys)
            n = t.num_rows
            w.write(**{k: t.column(k).to_numpy() for k in keys},
                    logits=rng.normal(0, 2, (n, len(tasks))).astype(np.float32),
                    emb=rng.normal(0, 1, (n, EMB)).astype(np.float32))


def _join(data: Path, store: Path) -> None:
    import pyarrow.parquet as pq

    from gemkd.transfer.store import TeacherStore

    DatasetReader = _reader_class()

    ts = TeacherStore(store)
    days = (DAYS - STUDENT_DAYS, DAYS)
    try:
        from gemkd.transfer.store.stream_join import StreamJoin

        join = StreamJoin(ts, days=days, domains=[0], policy="mask", with_emb=True)
    except ImportError:  # a checkout before it: the whole store, as its Inputs.teacher read it
        from gemkd.transfer.store import TeacherJoin

        join = TeacherJoin(ts, policy="mask", with_emb=True)  # type: ignore[assignment]
    reader = DatasetReader(data, days=days, batch_size=1)
    for u in reader.units:
        t = pq.ParquetFile(u.path).read_row_group(u.row_group, columns=["example_id", "domain"])
        ids = t.column("example_id").to_numpy()[t.column("domain").to_numpy() == 0]
        for lo in range(0, len(ids), 1024):
            join(ids[lo:lo + 1024])
    if join.coverage != 1.0 or join.requested == 0:
        raise SystemExit(f"join: coverage {join.coverage} of {join.requested} rows")
    print(json.dumps({"rows_joined": join.requested}))


def _codes(store: Path, tmp: Path) -> None:
    from types import SimpleNamespace

    from gemkd.experiments.run.codes_step import build_codes

    cfg = SimpleNamespace(code_dim=8, bits=8, epochs=1)
    build_codes(store, (0, WINDOW), cfg, seed=0, cache=tmp, log=lambda _: None)


def _summary(data: Path) -> None:
    try:
        from gemkd.transfer.data.dataset_summary import impressions_per_user, summarize
    except ImportError:  # a checkout before the module's rename (--before)
        old = importlib.import_module("gemkd.transfer.data.summary")
        impressions_per_user, summarize = old.impressions_per_user, old.summarize

    summarize(data)
    impressions_per_user(data)


def _validate(data: Path) -> None:
    from gemkd.transfer.data.audit import validate_dataset

    validate_dataset(data)


def _log(out: Path, rows: int) -> None:
    from benchmarks.import_log import generate

    generate(rows, out)


def _import(log: Path, tmp: Path) -> None:
    from gemkd.transfer.data.importer import import_logs, load_mapping

    import_logs(log, load_mapping(log / "mapping.yaml"), tmp / "ds")


def _export(data: Path, tmp: Path) -> None:
    from gemkd.experiments.teacher.teacher_config import build_model, load_teacher_config
    from gemkd.experiments.teacher.teacher_export import export_model
    from gemkd.transfer.data.schema import DatasetSchema

    cfg = load_teacher_config(ROOT / "experiments/teacher/configs/tiny.yaml",
                              {"train_days": [0, WINDOW], "val_days": None})
    model = build_model(cfg, DatasetSchema.load(data))
    export_model(model, cfg, data, tmp / "store", teacher_version="0" * 64, progress=False)


def _reader(data: Path) -> None:
    from collections import deque

    deque(_reader_class()(data), maxlen=0)


def _code_store(store: Path, out: Path) -> None:
    import numpy as np

    from gemkd.transfer.store import TeacherStore

    ts, rng = TeacherStore(store), np.random.default_rng(0)
    keys = ("example_id", "user_id", "ts", "day")
    chunks = ((*(t.column(k).to_numpy() for k in keys),
               rng.integers(-127, 128, (t.num_rows, 8)).astype(np.int8))
              for t in ts.iter_row_groups(None, list(keys)))
    meta = {"teacher_version": "0" * 64}
    try:
        from gemkd.transfer.repr_features.code_sort import write_code_store_streamed
    except ImportError:  # a checkout before it: held whole, as its codes step did
        from gemkd.transfer.repr_features import write_code_store

        eid, uid, t, d, q = (np.concatenate(p) for p in zip(*chunks, strict=True))
        write_code_store(out, eid, uid, t, d, q, 8, 8, meta)
        return
    write_code_store_streamed(out, chunks, 8, 8, meta)


def _asof(data: Path, codes: Path) -> None:
    import inspect

    import pyarrow.parquet as pq

    from gemkd.transfer.repr_features import AsOfCodes, CodeStore

    DatasetReader = _reader_class()

    days = (DAYS - STUDENT_DAYS, DAYS)
    scoped = "days" in inspect.signature(AsOfCodes).parameters
    asof = AsOfCodes(CodeStore(codes), 50, **({"days": days} if scoped else {}))
    found = 0
    for u in DatasetReader(data, days=days, batch_size=1).units:
        t = pq.ParquetFile(u.path).read_row_group(u.row_group, columns=["user_id", "ts", "domain"])
        mine = t.column("domain").to_numpy() == 0
        uid, ts = t.column("user_id").to_numpy()[mine], t.column("ts").to_numpy()[mine]
        for lo in range(0, len(uid), 1024):
            found += int((asof.lookup_mean(uid[lo:lo + 1024], ts[lo:lo + 1024]) != 0).any(1).sum())
    print(json.dumps({"codes_kept": len(asof), "rows_with_codes": found}))


def child(step: str, data: Path, store: Path, tmp: Path, rows: int) -> None:
    import torch

    torch.set_num_threads(1)
    if step == "world":
        _make_world(data, rows)
    elif step == "store":
        _make_store(data, store)
    elif step == "join":
        _join(data, store)
    elif step == "codes":
        _codes(store, tmp)
    elif step == "summary":
        _summary(data)
    elif step == "validate":
        _validate(data)
    elif step == "log":
        _log(data.parent / f"log-{rows}", rows)
    elif step == "import":
        _import(data.parent / f"log-{rows}", tmp)
    elif step == "export":
        _export(data, tmp)
    elif step == "reader":
        _reader(data)
    elif step == "codestore":
        _code_store(store, store.parent / f"{store.name}-codes")
    elif step == "codewrite":
        _code_store(store, tmp / "codes")
    elif step == "asof":
        _asof(data, store.parent / f"{store.name}-codes")
    else:
        raise SystemExit(f"unknown step {step!r}")


# ---- the parent: worlds, stores and measured children ------------------------------------------
def measure(step: str, tree: Path, data: Path, store: Path, rows: int) -> dict:
    """Run one step in a child that imports gemkd from ``tree``; its wall time and peak RSS."""
    from benchmarks.common import run_child

    with tempfile.TemporaryDirectory(dir=data.parent) as tmp:
        r = run_child([str(Path(__file__).resolve()), "--child", step, "--data", str(data),
                       "--store", str(store), "--tmp", tmp, "--rows", str(rows)],
                      f"{step} at {rows} rows ({tree})", tree=tree, cwd=Path(tmp),
                      capture=False)
    return {"seconds": round(r.seconds, 2), "peak_mb": round(r.peak_mb, 1)}


def fit(sizes: list[int], peaks_mb: list[float]) -> tuple[float, float]:
    """Least-squares peak = a + b * rows: (a in bytes, b in bytes per row)."""
    import numpy as np

    b, a = np.polyfit(np.asarray(sizes, float), np.asarray(peaks_mb, float) * 2**20, 1)
    return float(a), float(b)


def figures_of(table: dict, sizes: list[int]) -> list[dict]:
    from benchmarks.common import figure

    out = []
    for code, steps in table.items():
        for step, by_rows in steps.items():
            peaks = [by_rows[str(n)]["peak_mb"] for n in sizes]
            secs = [by_rows[str(n)]["seconds"] for n in sizes]
            a, b = fit(sizes, peaks) if len(sizes) > 1 else (peaks[0] * 2**20, 0.0)
            oom = (LIMIT - a) / b if b > 1 else None
            tag = f"{step} ({code})"
            out.append(figure(f"{tag}: peak RSS growth", round(b, 1), "B/row",
                              "<= 20" if code == "this tree" else None,
                              note=f"{sizes[0]:,}..{sizes[-1]:,} rows"))
            out.append(figure(f"{tag}: peak RSS at {sizes[-1]:,} rows", peaks[-1], "MB"))
            out.append(figure(f"{tag}: time at {sizes[-1]:,} rows", secs[-1], "s",
                              note=f"{secs[-1] / sizes[-1] * 1e6:.1f} µs/row"))
            out.append(figure(f"{tag}: rows at 24 GB", None if oom is None else round(oom),
                              "rows", note="never (flat)" if oom is None else "extrapolated"))
    return out


def main() -> None:
    from benchmarks.common import add_common_args, apply_common_args, print_figures, write_json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    p.add_argument("--rows", default="250000,500000,1000000",
                   help="comma-separated world sizes (impressions)")
    p.add_argument("--before", type=Path, default=None,
                   help="another checkout whose gemkd is measured too (e.g. main's)")
    p.add_argument("--work", type=Path, default=None,
                   help="where worlds and stores are kept (reused if there; default: a "
                        "temporary directory removed after)")
    p.add_argument("--steps", default=",".join(STEPS))
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--tmp", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.data, args.store, args.tmp, int(args.rows))
        return
    apply_common_args(p, args)
    sizes = [20_000, 40_000] if args.quick else [int(x) for x in args.rows.split(",")]
    steps = [s for s in args.steps.split(",") if s]
    trees = {"this tree": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        table: dict = {code: {s: {} for s in steps} for code in trees}
        for n in sizes:
            data, store = work / f"world-{n}", work / f"store-{n}"
            if not (data / "schema.json").is_file():
                print(f"world of {n:,} rows: {measure('world', ROOT, data, store, n)}")
            if not (store / "manifest.json").is_file():
                print(f"store of {n:,} rows: {measure('store', ROOT, data, store, n)}")
            if "import" in steps and not (work / f"log-{n}" / "mapping.yaml").is_file():
                print(f"event log of {n:,} rows: {measure('log', ROOT, data, store, n)}")
            if "asof" in steps and not (work / f"store-{n}-codes" / "codes.json").is_file():
                print(f"codes of {n:,} rows: {measure('codestore', ROOT, data, store, n)}")
            for code, tree in trees.items():
                for s in steps:
                    table[code][s][str(n)] = r = measure(s, tree, data, store, n)
                    print(f"{code:>9} {s:>8} {n:>9,} rows: {r['seconds']:7.1f} s "
                          f"{r['peak_mb']:8.1f} MB", flush=True)
    figures = figures_of(table, sizes)
    print_figures(figures)
    write_json(args.json, {"bench": "scale", "quick": args.quick, "rows": sizes,
                           "table": table, "figures": figures,
                           "total_seconds": round(time.perf_counter() - t_start, 1)})


if __name__ == "__main__":
    main()
