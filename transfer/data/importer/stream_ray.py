"""The streaming import's two passes as Ray tasks (``import_logs(engine="ray")``, DESIGN §2.4).

The same work as :mod:`.stream`, cut where it is independent, and the same bytes:

1. **scan**: a task per log file (a Parquet file of several row groups: per run of row groups
   of at least 4 batches) reads it a batch at a time (``source.batches``) and converts, checks
   and spills each batch as the one-machine scan does (``stream._gather``: errors name the
   file's own row); each returns its vocabularies and counts, merged here. A row's file order
   is ``task index · 2**40 + its place in the task`` and a spilled chunk's number ``task index
   · 10**9 + its place``: both keep the one-machine order (tasks go in file, then row order),
   so a date's rows sort and concatenate as they do there.
2. **encode**: a task per date loads its spill, sorts it by (time, file order), numbers it
   from the rows of the dates before it (known after the scan) and encodes it
   (``stream._encode``), its history events split by user shard.
3. **histories**: users split into shards (``user_id mod shards``, one per CPU of the
   cluster); each shard is a chain of tasks, date by date in time order, joining the date's
   events of its users to their carried state (:mod:`.stream_ray_hist`): a user's history
   needs only that user's earlier events, so shards run side by side.
4. **write**: a task per run of dates that share no day with other dates (calendar days: a
   date, or the dates folded into day 0) puts the shards' histories back in row order and
   writes the days a row group at a time (``stream_write.DayWriter``), once its dates'
   histories are joined.

Intermediate files live in the output's staging folder (``.spill``), which every node must
read: the output directory goes on storage the cluster shares. No task deletes what it reads
(a task Ray runs again after its worker died finds its inputs as they were and writes the same
files); this process removes a stage's files once the stage that reads them has finished.

Ray Data's readers are not used: their CSV type inference (Arrow's) and block boundaries are
not pandas' chunked reader's, so neither the types nor the rows an error names would be the
one-machine import's.
"""

from __future__ import annotations

import logging
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gemkd.transfer.data.dataset_writer import DayWriter
from gemkd.transfer.data.importer import id_vocab, log_checks, source, stream, stream_ray_hist
from gemkd.transfer.data.importer.mapping import Mapping, SideTable
from gemkd.transfer.data.importer.stream_write import Hist
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import DataError
from gemkd.transfer.ray_cluster import ray_connected

log = logging.getLogger(__name__)

ORDER_STRIDE = 1 << 40   # a scan task's rows' order numbers start at its index times this
CHUNK_STRIDE = 10**9     # and its spilled chunks' numbers at its index times this
SPLIT_BATCHES = 4        # a Parquet file is scanned in runs of row groups of this many batches
HISTORY_SHARDS: int | None = None  # user shards of the histories (None: the cluster's CPUs)


def import_on_ray(files: list[Path], m: Mapping, side: list[tuple[SideTable, Path]],
                  notes: list[str], out: Path, extract: stream.Extract,
                  check_header: Callable[[Path], list[str]],
                  batch_rows: int = stream.BATCH_ROWS, part_rows: int = stream.PART_ROWS
                  ) -> DatasetSchema:
    """:func:`stream.import_streaming` on Ray: the same dataset under ``out`` (an output
    directory's staging folder, which every node reads) and its schema.

    Raises
    ------
    ConfigError
        Ray is not installed, the cluster does not answer, or a node does not see ``out``.
    DataError
        The one-machine import's errors, raised here from the task that met them (the first
        in file order).
    """
    if part_rows < stream.ROW_GROUP_SIZE or part_rows % stream.ROW_GROUP_SIZE:
        raise ValueError(f"part_rows must be a positive multiple of {stream.ROW_GROUP_SIZE} "
                         f"(whole row groups), got {part_rows}")
    spill = out / ".spill"
    with ray_connected("--engine ray") as ray:
        try:
            scan = _scan(ray, files, m, spill, extract, check_header, batch_rows)
            stream._range_note(scan, m, notes)
            stream.scan_notes(scan, m, notes)
            plan = stream._Plan.of(scan, m, side, notes)
            schema = plan.schema(m)
            schema.vocabularies = id_vocab.write(plan.vocab, out, m)
            repeats = _write(ray, scan, plan, m, spill, out, schema, part_rows, notes)
            log_checks.emit(notes, [log_checks.duplicate_note(repeats, scan.kept)])
        finally:
            shutil.rmtree(spill, ignore_errors=True)
    return schema


# ---- pass 1: a task per file, or per run of a Parquet file's row groups ---------------------
@dataclass(frozen=True)
class _Split:
    """What one scan task reads: a file, or some of a Parquet file's row groups."""

    path: Path
    row_groups: list[int] | None = None  # None: the whole file
    first: int = 0                       # the file's row number of the split's first row


def _scan(ray: Any, files: list[Path], m: Mapping, spill: Path, extract: stream.Extract,
          check_header: Callable[[Path], list[str]], batch_rows: int) -> stream._Scan:
    task = ray.remote(num_cpus=1)(_scan_split)
    splits = [s for path in files for s in _splits(path, SPLIT_BATCHES * batch_rows)]
    refs = [task.remote(i, s, m, spill, extract, check_header, batch_rows)
            for i, s in enumerate(splits)]
    scan = stream._Scan()
    per_file = dict.fromkeys(files, 0)
    for split, part in zip(splits, _in_order(ray, refs), strict=True):
        per_file[split.path] += part.read
        _add(scan, part)
    for path, n in per_file.items():
        log.info("%s: %d rows", path, n)
    if scan.read == 0:
        raise DataError(f"{', '.join(str(f) for f in files)}: no rows")
    return scan


def _splits(path: Path, rows: int) -> list[_Split]:
    """A file's scan tasks: a Parquet file of several row groups in runs of whole row groups of
    at least ``rows`` rows; any other file (or one whose footer does not read: its task then
    raises the one-machine import's error) whole."""
    if not path.name.lower().endswith(source.PARQUET_SUFFIXES):
        return [_Split(path)]
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception:  # noqa: BLE001 - reported, in file order, by the file's task
        return [_Split(path)]
    splits: list[_Split] = []
    groups: list[int] = []
    first = n = 0
    for g in range(meta.num_row_groups):
        groups.append(g)
        n += meta.row_group(g).num_rows
        if n >= rows or g == meta.num_row_groups - 1:
            splits.append(_Split(path, groups, first))
            first, n, groups = first + n, 0, []
    return splits if len(splits) > 1 else [_Split(path)]


def _scan_split(index: int, split: _Split, m: Mapping, spill: Path, extract: stream.Extract,
                check_header: Callable[[Path], list[str]], batch_rows: int) -> stream._Scan:
    """One split's scan (``stream._scan``'s loop): its vocabularies and counts, ``read`` its
    rows; its batches spilled by date."""
    stream_ray_hist.shared(spill)
    scan = stream._Scan(read=index * ORDER_STRIDE, chunks=index * CHUNK_STRIDE)
    path = split.path
    columns = check_header(path)
    for first, df in source.batches(path, columns, batch_rows, split.row_groups, m.columns):
        if len(df):
            with source.rows_from(split.first + first):
                rows = extract(df, path, m)
            stream._gather(scan, rows, m, spill)
    scan.read -= index * ORDER_STRIDE
    return scan


def _add(scan: stream._Scan, part: stream._Scan) -> None:
    """A file's scan added to the log's (every gathered quantity is a set, sum, min or max)."""
    scan.read += part.read
    scan.kept += part.kept
    scan.before += part.before
    scan.after += part.after
    if part.date_min is not None:
        scan.date_min = (part.date_min if scan.date_min is None
                         else min(scan.date_min, part.date_min))
    if part.extent is not None:
        scan.extent = part.extent if scan.extent is None else (
            min(scan.extent[0], part.extent[0]), max(scan.extent[1], part.extent[1]))
    for name, d in part.distinct.items():
        into = scan.distinct.setdefault(name, stream._Distinct())
        for values in d.parts:
            into.add(values)
    for name, v in part.maxima.items():
        scan.maxima[name] = max(scan.maxima.get(name, v), v)
    scan.domain.values += part.domain.values
    scan.domain.counts += part.domain.counts
    scan.users.values += part.users.values
    scan.users.counts += part.users.counts
    for name, n in part.positives.items():
        scan.positives[name] = scan.positives.get(name, 0) + n
    for date, n in part.dates.items():
        scan.dates[date] = scan.dates.get(date, 0) + n
    scan.ts += part.ts


# ---- pass 2: encode (a task per date), histories (a chain per user shard), write -----------
def _write(ray: Any, scan: stream._Scan, plan: stream._Plan, m: Mapping, spill: Path,
           out: Path, schema: DatasetSchema, part_rows: int, notes: list[str]) -> int:
    arrow = schema.arrow_schema()
    fields = [(f"hist_{f.name}", f.kind) for f in (m.history.fields if m.history else ())]
    names = [n for n, kind in fields if kind != "age"]
    shards = HISTORY_SHARDS or max(1, int(ray.cluster_resources().get("CPU", 1)))
    dates = sorted(scan.dates)
    starts = np.cumsum([0] + [scan.dates[d] for d in dates[:-1]])
    encode = ray.remote(num_cpus=1)(_encode_date)
    join = ray.remote(num_cpus=1, num_returns=2)(stream_ray_hist.join_shard)
    write = ray.remote(num_cpus=1)(_write_days)
    plan_ref, m_ref = ray.put(plan), ray.put(m)
    refs = [encode.remote(d, int(first), plan_ref, m_ref, spill, shards if fields else 0)
            for d, first in zip(dates, starts, strict=True)]
    written: list = []
    runs: list[list[int]] = []  # each write task's dates
    carries: list = [None] * shards  # each shard's latest state (a ref), dropped once passed on
    matched = {str(path): 0 for _, path, _ in plan.side}
    run: list[int] = []   # consecutive dates whose days no other date holds: one write task
    joined: list = []     # the history joins the run's write task waits on
    last_day = -1
    spans: dict[int, list[int]] = {}  # buckets: each day's first and last second
    repeats = 0  # rows repeating an earlier row (a repeat has its original's time and date)
    try:
        for date, ref in zip(dates, list(refs), strict=True):
            hits, first_day, final_day, date_spans, date_repeats = _in_order(ray, [ref])[0]
            repeats += date_repeats
            for d, (lo, hi) in date_spans.items():
                span = spans.setdefault(d, [lo, hi])
                span[0], span[1] = min(span[0], lo), max(span[1], hi)
            shutil.rmtree(spill / f"date={date}")  # encoded: its scan spill is spent
            for path, n in hits.items():
                matched[path] += n
            if run and first_day > last_day:
                written.append(write.remote(run, spill, out, arrow, fields, part_rows, shards,
                                            *joined))
                runs.append(run)
                run, joined = [], []
            run.append(date)
            last_day = final_day
            for shard in range(shards if fields else 0):
                carries[shard], done = join.remote(carries[shard], spill, date, shard, names,
                                                   schema.max_history)
                joined.append(done)
                refs.append(done)
        written.append(write.remote(run, spill, out, arrow, fields, part_rows, shards,
                                    *joined))
        runs.append(run)
        del carries
        rows: dict[int, int] = {}
        for ref, dates_written in zip(written, runs, strict=True):
            rows.update(_in_order(ray, [ref])[0])
            for date in dates_written:  # written: their intermediate files are spent
                _cols_path(spill, date).unlink()
                for kind in ("events", "hist"):
                    shutil.rmtree(spill / kind / f"date={date}", ignore_errors=True)
    except Exception:  # a task's error: the others end on their own (see _stop)
        _stop(ray, refs + written, cancel=False)
        raise
    except BaseException:  # an interrupt
        _stop(ray, refs + written, cancel=True)
        raise
    for d in sorted(rows):
        schema.rows_per_day[str(d)] = rows[d]
    stream.set_day_dates(schema, spans)
    for s, path, _ in plan.side:
        if matched[str(path)] == 0:
            notes.append(f"side table {path}: no log row matched its key {s.key!r} "
                         f"(log column {s.on!r}); its features are all 0")
    return repeats


def _encode_date(date: int, next_id: int, plan: stream._Plan, m: Mapping, spill: Path,
                 shards: int) -> tuple[dict[str, int], int, int, dict[int, list[int]], int]:
    """A date's rows sorted, numbered from ``next_id`` and encoded (``stream._write``'s first
    steps), saved for the writer, and their history events by user shard (``shards`` 0: no
    histories); the rows each side table matched, the date's first and last day, and (time
    buckets) each day's first and last second, and the rows repeating an earlier row."""
    stream_ray_hist.shared(spill)
    rows = _load(spill / f"date={date}")
    repeats = log_checks.duplicates({k: v for k, v in rows.items() if k != "order"})
    rows = stream._take(rows, np.lexsort((rows["order"], rows["t"])))
    matched = {str(path): 0 for _, path, _ in plan.side}
    cols, events = stream._encode(rows, date, plan, m, next_id, matched)
    del rows
    if shards:
        t = events.pop("t")
        stream_ray_hist.split_events(spill, date, shards, cols["user_id"], t,
                                     cols["example_id"], events)
    _dump(cols, _cols_path(spill, date))
    spans: dict[int, list[int]] = {}
    if plan.edges is not None:
        stream.add_spans(spans, cols["day"], cols["ts"])
    return matched, int(cols["day"][0]), int(cols["day"][-1]), spans, repeats


def _write_days(dates: list[int], spill: Path, out: Path, arrow: pa.Schema,
                fields: list[tuple[str, str]], part_rows: int, shards: int,
                *joined: int) -> dict[int, int]:
    """The days of consecutive ``dates`` (no other date holds any of them) written a row group
    at a time, as ``stream._write`` writes them, once their histories are ``joined``; each
    day's rows."""
    stream_ray_hist.shared(spill)
    writers: dict[int, DayWriter] = {}
    rows: dict[int, int] = {}
    for date in dates:
        with open(_cols_path(spill, date), "rb") as f:
            cols = pickle.load(f)
        hist: Hist | None = None
        if fields:
            hist = stream_ray_hist.gather(spill, date, shards, len(cols["day"]))
        for lo, hi, day in stream._slices(cols["day"]):
            table = stream._table(cols, lo, hi, arrow, hist, fields)
            if day not in writers:
                for d in [d for d in writers if d < day]:  # days only move forward
                    rows[d] = writers.pop(d).close()
                writers[day] = DayWriter(out, day, arrow, part_rows)
            writers[day].add(table)
    for d, w in writers.items():
        rows[d] = w.close()
    return rows


# ---- helpers --------------------------------------------------------------------------------
def _in_order(ray: Any, refs: list) -> list:
    """The tasks' results in order; the first failure (in order) raised as the error the task
    raised (a ``DataError`` naming the file's row, not Ray's wrapper), the others stopped."""
    try:
        return [ray.get(ref) for ref in refs]
    except ray.exceptions.RayTaskError as e:
        _stop(ray, refs, cancel=False)
        cause = getattr(e, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise
    except BaseException:
        _stop(ray, refs, cancel=True)
        raise


def _stop(ray: Any, refs: list, cancel: bool) -> None:
    """Wait for the tasks to end, so none writes after the staging folder is removed;
    ``cancel`` (an interrupt) cancels them first.

    A task's error does not cancel the others: Ray 2.60 aborts the driver process ("Check
    failed: it != submissible_tasks_.end()", task_manager.cc) when a force-cancelled task's
    reply arrives as it is cancelled, which a test run hit; the other tasks are bounded (a
    scan of one file's batches, a date), so they are waited for instead. An interrupt still
    cancels them (not forced: the task stops at its next Python instruction)."""
    if cancel:
        for ref in refs:
            try:
                ray.cancel(ref, force=False)
            except Exception:  # noqa: BLE001 - finished or already gone: nothing to cancel
                pass
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=60)


def _load(folder: Path) -> dict:
    """A date's spilled chunks in file order, then read order (chunk numbers: ``_scan_split``),
    as one set of columns (``stream._load``'s, which reads a folder in name order)."""
    parts = []
    for p in sorted(folder.glob("*.pkl"), key=lambda p: int(p.stem)):
        with open(p, "rb") as f:
            parts.append(pickle.load(f))
    return {k: (pd.concat([p[k] for p in parts], ignore_index=True)
                if isinstance(parts[0][k], pd.Series) else np.concatenate([p[k] for p in parts]))
            for k in parts[0]}


def _cols_path(spill: Path, date: int) -> Path:
    return spill / "cols" / f"date={date}.pkl"


def _dump(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
