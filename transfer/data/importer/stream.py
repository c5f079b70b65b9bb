"""The streaming import: a log of any length in memory bounded by its largest day (DESIGN §2.4).

Two passes over the log, each a batch of rows at a time (``source.batches``: pandas' chunked CSV
reader, Parquet record batches with column projection):

1. **scan**: every batch is checked and converted as the in-memory import does (``_extract``,
   errors naming the file's own row), cut to the mapping's date range, and its vocabularies
   gathered: the distinct ids and categorical values (dense codes are their sorted order),
   the rows of each domain value, log2 buckets' largest, the first time or date (day 0) and
   the rows of each date (the straggler and gap checks). The converted batch is sorted by
   date (calendar days: the local date; buckets: the UTC date) and spilled to a local folder
   in segments of consecutive dates (``batch_rows / 16`` rows or more each, a date never
   split), so a log of thousands of thin days spills a few files, not a file per date.
2. **write**: group by group in time order, a group being consecutive dates of at most
   ``batch_rows / 4`` rows together (or one larger date, alone as before: a day of many rows
   costs no more memory than it did): the group's rows are sorted by (date,
   time, file order), numbered, encoded with the vocabularies, and written a row group at a
   time, each user's most recent ``max_events`` events carried from one group to the next for
   the histories (a merge with the carried events per group: the cost of a group grows with
   the users seen so far, so groups, not dates, keep a thin log's import linear in its rows).
   A day is one or more part files (``part-K.parquet``, at most ``part_rows`` rows each): the
   writer never holds a day, only a row group.

It writes the same dataset as the in-memory import (``build.import_logs(streaming=False)``),
the same bytes for a day of at most ``part_rows`` rows. Sampled negatives need the whole log
(every row's pool looks at every item's first time and every user's pairs), so a mapping with
``negatives`` is imported in memory. With ``days: {buckets: N}`` the scan keeps every row's
time (8 bytes a row) for the equal-count edges.
"""

from __future__ import annotations

import logging
import pickle
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gemkd.transfer.data import vocabulary
from gemkd.transfer.data.dataset_writer import PART_ROWS, ROW_GROUP_SIZE, DayWriter
from gemkd.transfer.data.importer import encode, id_vocab, log_checks, sides, source
from gemkd.transfer.data.importer.mapping import Ids, Mapping, SideTable
from gemkd.transfer.data.importer.stream_write import Carry, Hist
from gemkd.transfer.data.ranges import N_AGE_BUCKETS, age_buckets, gather_ranges
from gemkd.transfer.data.schema import DatasetSchema, Feature
from gemkd.transfer.errors import DataError

log = logging.getLogger(__name__)

BATCH_ROWS = 262_144             # rows read and converted at a time
SEGMENTS_PER_BATCH = 16          # a batch spills segments of >= batch_rows / 16 rows
GROUP_SHARE = 4                  # pass 2 writes dates in groups of <= batch_rows / 4 rows
DAY_NS = 86_400 * 10**9
_COMPACT = 4_000_000             # distinct values gathered before they are deduplicated
Extract = Callable[[pd.DataFrame, Path, Mapping], dict]
DATE_KEY = "spill:date"          # a spilled row's partition date (days since 1970-01-01)


@dataclass
class _Distinct:
    """The distinct values of a column over every batch (in :func:`encode.factorize`'s sense)."""

    parts: list[pd.Series] = field(default_factory=list)
    size: int = 0

    def add(self, s: pd.Series) -> None:
        u = s.drop_duplicates()
        self.parts.append(u)
        self.size += len(u)
        if self.size > _COMPACT:
            self.parts = [pd.concat(self.parts, ignore_index=True).drop_duplicates()]
            self.size = len(self.parts[0])

    def values(self) -> pd.Series:
        return pd.concat(self.parts, ignore_index=True) if self.parts else pd.Series([])


@dataclass
class _Counts:
    """Rows per value of a column over every batch (missing values included)."""

    values: list[pd.Series] = field(default_factory=list)
    counts: list[np.ndarray] = field(default_factory=list)

    def add(self, s: pd.Series) -> None:
        vc = s.value_counts(dropna=False, sort=False)
        self.values.append(pd.Series(vc.index, dtype=s.dtype if len(vc) else object))
        self.counts.append(vc.to_numpy())

    def table(self) -> tuple[pd.Index, np.ndarray]:
        code, uniq = encode.factorize(pd.concat(self.values, ignore_index=True))
        return uniq, np.bincount(code, weights=np.concatenate(self.counts),
                                 minlength=len(uniq) + 1).astype(np.int64)


@dataclass
class _Scan:
    """What the first pass gathers: vocabularies, day 0, and where each date's rows went."""

    read: int = 0
    kept: int = 0
    before: int = 0
    after: int = 0
    date_min: int | None = None            # the date column's first date (days since 1970)
    extent: tuple[int, int] | None = None  # the first and last local date of every row read
    distinct: dict[str, _Distinct] = field(default_factory=dict)
    maxima: dict[str, int] = field(default_factory=dict)
    domain: _Counts = field(default_factory=_Counts)
    dates: dict[int, int] = field(default_factory=dict)  # partition → rows
    ts: list[np.ndarray] = field(default_factory=list)   # buckets only
    chunks: int = 0
    segments: list[_Segment] = field(default_factory=list)  # spilled runs of dates (local)
    positives: dict[str, int] = field(default_factory=dict)  # each label's rows with 1
    users: _Counts = field(default_factory=_Counts)          # rows per user id
    one_event: float | None = None                           # share of one-row users


@dataclass(frozen=True)
class _Segment:
    """A spilled file: rows of the consecutive dates ``first..last`` of one batch, sorted by
    date (``chunk``: its number, in read order)."""

    first: int
    last: int
    chunk: int


def import_streaming(files: list[Path], m: Mapping, side: list[tuple[SideTable, Path]],
                     notes: list[str], out: Path, extract: Extract,
                     check_header: Callable[[Path], list[str]],
                     batch_rows: int = BATCH_ROWS, part_rows: int = PART_ROWS
                     ) -> DatasetSchema:
    """Write the dataset of ``files`` under ``out`` (an output directory's staging folder) and
    return its schema (``rows_per_day`` filled). ``extract`` and ``check_header`` are the
    in-memory import's per-file conversion and column check (build.py), applied per batch."""
    if part_rows < ROW_GROUP_SIZE or part_rows % ROW_GROUP_SIZE:
        raise ValueError(f"part_rows must be a positive multiple of {ROW_GROUP_SIZE} (whole "
                         f"row groups), got {part_rows}")
    spill = out / ".spill"
    try:
        scan = _scan(files, m, spill, extract, check_header, batch_rows)
        _range_note(scan, m, notes)
        scan_notes(scan, m, notes)
        plan = _Plan.of(scan, m, side, notes)
        schema = plan.schema(m)
        schema.vocabularies = id_vocab.write(plan.vocab, out, m)
        repeats = _write(scan, plan, m, spill, out, schema, part_rows, notes,
                         max(1, batch_rows // GROUP_SHARE))
        log_checks.emit(notes, [log_checks.duplicate_note(repeats, scan.kept)])
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return schema


# ---- pass 1: scan ---------------------------------------------------------------------------
def _scan(files: list[Path], m: Mapping, spill: Path, extract: Extract,
          check_header: Callable[[Path], list[str]], batch_rows: int) -> _Scan:
    scan = _Scan()
    for path in files:
        columns = check_header(path)
        n = 0
        for first, df in source.batches(path, columns, batch_rows, names=m.columns):
            n += len(df)
            if not len(df):
                continue
            with source.rows_from(first):
                rows = extract(df, path, m)
            _gather(scan, rows, m, spill, max(1, batch_rows // SEGMENTS_PER_BATCH))
        log.info("%s: %d rows", path, n)
    if scan.read == 0:
        raise DataError(f"{', '.join(str(f) for f in files)}: no rows")
    return scan


def _gather(scan: _Scan, rows: dict, m: Mapping, spill: Path, segment_rows: int = 0) -> None:
    """Cut a converted batch to the date range, add it to the vocabularies, spill it: in
    segments of at least ``segment_rows`` rows (``scan.segments``), or with ``segment_rows``
    0 a file per date in a folder per date (the Ray import's layout, :mod:`.stream_ray`)."""
    n = len(rows["t"])
    order = np.arange(scan.read, scan.read + n, dtype=np.int64)  # file order, over every file
    scan.read += n
    tz = m.days.calendar or "UTC"
    date = encode.local_dates(rows["t"], tz)
    lo_hi = (int(date.min()), int(date.max()))
    scan.extent = lo_hi if scan.extent is None else (min(scan.extent[0], lo_hi[0]),
                                                     max(scan.extent[1], lo_hi[1]))
    keep = np.ones(n, dtype=bool)
    if m.days.first:
        lo = date < _epoch_day(m.days.first)
        scan.before += int(lo.sum())
        keep &= ~lo
    if m.days.last:
        hi = date > _epoch_day(m.days.last)
        scan.after += int(hi.sum())
        keep &= ~hi
    if not keep.all():
        idx = np.flatnonzero(keep)
        rows, order, date = _take(rows, idx), order[idx], date[idx]
    if not len(order):
        return
    scan.kept += len(order)
    t = rows["t"]
    if "date" in rows:
        d = int(rows["date"].min())
        scan.date_min = d if scan.date_min is None else min(scan.date_min, d)
    if m.days.buckets is not None:
        scan.ts.append(t // 10**9)
    for role, ids in (("user", m.user), ("item", m.item)):
        if ids is None:
            continue
        if ids.ids == "raw":
            scan.maxima[role] = max(scan.maxima.get(role, 0), int(rows[role].max()))
        else:
            scan.distinct.setdefault(role, _Distinct()).add(rows[role])
    for c in m.categorical:
        v = rows[f"cat:{c.name}"]
        if c.bucket:
            card = encode.log2_buckets(v)[1]
            scan.maxima[c.name] = max(scan.maxima.get(c.name, 1), card)
        else:
            scan.distinct.setdefault(c.name, _Distinct()).add(v)
    if m.domain is not None:
        scan.domain.add(rows["domain"])
    for lab in m.labels:
        scan.positives[lab.name] = (scan.positives.get(lab.name, 0)
                                    + int(rows[f"label:{lab.name}"].sum(dtype=np.int64)))
    if m.user is not None:
        scan.users.add(pd.Series(rows["user"]))
    rows["order"] = order
    if segment_rows:
        _spill_segments(scan, rows, date, spill, segment_rows)
        return
    for d in np.unique(date):
        at = np.flatnonzero(date == d)
        folder = spill / f"date={int(d)}"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{scan.chunks:08d}.pkl", "wb") as f:
            pickle.dump(_take(rows, at), f, protocol=pickle.HIGHEST_PROTOCOL)
        scan.chunks += 1
        scan.dates[int(d)] = scan.dates.get(int(d), 0) + len(at)


def scan_notes(scan: _Scan, m: Mapping, notes: list[str]) -> None:
    """The whole-log checks on what the scan gathered (build._whole_log_notes): a label that
    never holds is an error; notes on labels that always hold and on a dominant user. Keeps
    the share of one-event users for the thin-days note."""
    new: list[str | None] = list(log_checks.check_labels(m, scan.positives, scan.kept,
                                                         m.negatives is not None))
    if m.user is not None:
        uniq, counts = scan.users.table()
        new += log_checks.user_notes(counts[1:], uniq, scan.kept)
        new.append(log_checks.one_event_note(counts[1:], m.days.buckets is not None))
        scan.one_event = log_checks.one_event_share(counts[1:])
    log_checks.emit(notes, new)


def _spill_segments(scan: _Scan, rows: dict, date: np.ndarray, spill: Path,
                    segment_rows: int) -> None:
    """A batch's rows sorted by date (stable: read order within a date), spilled as files of
    consecutive dates, each closed once it holds ``segment_rows`` rows."""
    at = np.argsort(date, kind="stable")  # each segment taken on its own: one copy at a time
    date = date[at]
    present, starts, counts = np.unique(date, return_index=True, return_counts=True)
    for d, c in zip(present.tolist(), counts.tolist(), strict=True):
        scan.dates[d] = scan.dates.get(d, 0) + c
    spill.mkdir(parents=True, exist_ok=True)
    lo, held = 0, 0
    for i, c in enumerate(counts.tolist()):
        held += c
        if held < segment_rows and i < len(counts) - 1:
            continue
        a, b = int(starts[lo]), int(starts[i]) + c
        segment = _take(rows, at[a:b])
        segment[DATE_KEY] = date[a:b]
        with open(spill / f"{scan.chunks:08d}.pkl", "wb") as f:
            pickle.dump(segment, f, protocol=pickle.HIGHEST_PROTOCOL)
        del segment
        scan.segments.append(_Segment(int(present[lo]), int(present[i]), scan.chunks))
        scan.chunks += 1
        lo, held = i + 1, 0


def _range_note(scan: _Scan, m: Mapping, notes: list[str]) -> None:
    """The in-memory import's note on the rows a date range left out (build._in_range)."""
    first, last = m.days.first, m.days.last
    if first is None and last is None:
        return
    span = f"{first or 'the first date'} to {last or 'the last date'} ({m.days.calendar})"
    if scan.kept == 0:
        assert scan.extent is not None  # _scan: some rows were read
        lo, hi = (str(np.datetime64(d, "D")) for d in scan.extent)
        raise DataError(f"{m.path}: key 'days': no row of the log is dated {span}: its rows "
                        f"run from {lo} to {hi}")
    if scan.before or scan.after:
        note = (f"days: kept the {scan.kept:,} rows dated {span}; left out {scan.before:,} "
                f"rows before it and {scan.after:,} after it")
        notes.append(note)
        log.info(note)


# ---- the vocabularies, days and schema ------------------------------------------------------
@dataclass
class _Plan:
    """How every partition's rows are encoded: the code tables of pass 1 and the day rule."""

    uniq: dict[str, pd.Index]
    cards: dict[str, int]
    domain: tuple[pd.Index, np.ndarray] | None
    domains: list[str]
    first: int | None          # calendar: day 0's date (days since 1970-01-01)
    edges: np.ndarray | None   # buckets: the equal-count edges (seconds)
    days: list[int]
    side: list[tuple[SideTable, Path, sides.Loaded]]
    vocab: dict[str, vocabulary.Vocabulary]  # each encoded column's (id_vocab.write)

    @classmethod
    def of(cls, scan: _Scan, m: Mapping, side: list[tuple[SideTable, Path]],
           notes: list[str]) -> _Plan:
        first, edges = None, None
        if m.days.calendar is not None:
            first = (scan.date_min if scan.date_min is not None else
                     _epoch_day(m.days.first) if m.days.first else min(scan.dates))
            dates = np.array(sorted(scan.dates))
            day = np.maximum(dates - first, 0)
            present, at = np.unique(day, return_inverse=True)
            counts = np.bincount(at, weights=[scan.dates[int(d)] for d in dates]).astype(int)
            log_checks.emit(notes, list(log_checks.day_notes(present, counts, first,
                                                             scan.one_event)))
            days = [int(d) for d in present]
        else:
            assert m.days.buckets is not None  # parse_mapping: calendar or buckets
            ts = np.concatenate(scan.ts)
            edges = np.quantile(ts, np.linspace(0, 1, m.days.buckets + 1)[1:-1])
            days = sorted(int(d) for d in np.unique(np.searchsorted(edges, ts, side="right")))
            del ts
        domain, domains = None, ["all"]
        vocab: dict[str, vocabulary.Vocabulary] = {}
        if m.domain is not None:
            where = f"{m.path}: key 'domain' (column {m.domain.column!r})"
            uniq, counts = scan.domain.table()
            table, domains = encode.domain_table(uniq, counts, m.domain.min_share,
                                                 m.domain.prefix, where)
            domain = (uniq, table)
            vocab["domain"] = vocabulary.domain(uniq, table, id_vocab.domain_source(m))
        uniq_by: dict[str, pd.Index] = {}
        cards: dict[str, int] = {}
        for role, ids in (("user", m.user), ("item", m.item)):
            if ids is not None:
                cards[role], vocab[f"{role}_id"] = _id_table(role, ids, scan, uniq_by, notes)
        for c in m.categorical:
            if c.bucket:
                cards[c.name] = scan.maxima.get(c.name, 1)
            else:
                uniq_by[c.name] = encode.factorize(scan.distinct[c.name].values())[1]
                cards[c.name] = len(uniq_by[c.name]) + 1
            vocab[c.name] = id_vocab.categorical_vocabulary(c, uniq_by.get(c.name))
        loaded = [(s, path, sides.load(m, s, path)) for s, path in side]
        for _, _, one in loaded:
            vocab.update(one.vocab)
        return cls(uniq_by, cards, domain, domains, first, edges, days, loaded, vocab)

    def schema(self, m: Mapping) -> DatasetSchema:
        """The schema the in-memory import builds (build._assemble), from the vocabularies."""
        categorical: list[Feature] = []
        if m.user is not None:
            categorical.append(Feature("user_id", self.cards["user"]))
        if m.item is not None:
            categorical.append(Feature("item_id", self.cards["item"]))
        categorical += [Feature(c.name, self.cards[c.name]) for c in m.categorical]
        dense = [c.name for c in m.dense]
        for _, _, loaded in self.side:
            categorical += [Feature(n, card) for n, (_, card) in loaded.categorical.items()]
            dense += list(loaded.dense)
        cards = {f.name: f.cardinality for f in categorical}
        sequence = []
        for f in m.history.fields if m.history else ():
            if f.kind == "feature":
                assert f.ref is not None  # parse_mapping: a feature field names its feature
                card = cards[f.ref]
            else:
                card = {"age": N_AGE_BUCKETS, "item": cards.get("item_id", 0), "label": 2,
                        "domain": len(self.domains), "levels": len(f.levels) + 1}[f.kind]
            sequence.append(Feature(f"hist_{f.name}", card))
        return DatasetSchema(
            source=m.source, categorical=categorical, dense=dense, sequence=sequence,
            tasks=[lab.name for lab in m.labels], domains=self.domains, days=self.days,
            max_history=m.history.max_events if m.history else 0)


def _id_table(role: str, ids: Ids, scan: _Scan, uniq_by: dict[str, pd.Index],
              notes: list[str]) -> tuple[int, vocabulary.Vocabulary]:
    """An id column's table rows and vocabulary (build._ids), noting a hash's collision
    rate."""
    where = id_vocab.id_source(ids)
    if ids.ids == "raw":
        return scan.maxima[role] + 1, vocabulary.rule_only("raw", where)
    values = scan.distinct[role].values()
    if ids.ids == "dense":
        uniq_by[role] = encode.factorize(values)[1]
        return len(uniq_by[role]) + 1, vocabulary.dense(uniq_by[role], where)
    assert ids.buckets is not None  # parse_mapping: hash comes with buckets
    h = encode.hashed(values, ids.buckets)
    note = encode.hash_note(ids.key, ids.buckets, h)
    notes.append(note)
    log.info(note)
    return h.cardinality, vocabulary.hashed(values, ids.buckets, where)


# ---- pass 2: write --------------------------------------------------------------------------
def _write(scan: _Scan, plan: _Plan, m: Mapping, spill: Path, out: Path, schema: DatasetSchema,
           part_rows: int, notes: list[str], group_rows: int) -> int:
    """Pass 2 (module docstring); returns the rows that repeat an earlier row in every column
    (a repeat has its original's time, so it is in the same group)."""
    arrow = schema.arrow_schema()
    fields = [(f"hist_{f.name}", f.kind) for f in (m.history.fields if m.history else ())]
    carry = Carry([n for n, kind in fields if kind != "age"], schema.max_history)
    writers: dict[int, DayWriter] = {}
    matched = {str(path): 0 for _, path, _ in plan.side}
    next_id = 0
    repeats = 0
    spans: dict[int, list[int]] = {}  # buckets: each day's first and last second
    for rows in _groups(scan, spill, group_rows):
        repeats += log_checks.duplicates({k: v for k, v in rows.items()
                                          if k not in ("order", DATE_KEY)})
        rows = _take(rows, np.lexsort((rows["order"], rows["t"], rows[DATE_KEY])))
        cols, events = _encode(rows, rows[DATE_KEY], plan, m, next_id, matched)
        next_id += len(rows["t"])
        del rows
        if plan.edges is not None:
            add_spans(spans, cols["day"], cols["ts"])
        hist = None
        if fields:
            hist = carry.join(cols["user_id"], events["t"], cols["example_id"],
                              {n: v for n, v in events.items() if n != "t"})
        for day, table in _day_tables(cols, arrow, hist, fields):
            if day not in writers:
                for d in [d for d in writers if d < day]:  # days only move forward
                    schema.rows_per_day[str(d)] = writers.pop(d).close()
                writers[day] = DayWriter(out, day, arrow, part_rows)
            writers[day].add(table)
    for d, w in writers.items():
        schema.rows_per_day[str(d)] = w.close()
    for s, path, _ in plan.side:
        if matched[str(path)] == 0:
            notes.append(f"side table {path}: no log row matched its key {s.key!r} "
                         f"(log column {s.on!r}); its features are all 0")
    set_day_dates(schema, spans)
    return repeats


def set_day_dates(schema: DatasetSchema, spans: dict[int, list[int]]) -> None:
    """Record each bucket's first and last event date (``spans``: seconds; none: calendar
    days) in ``schema.generator``."""
    if spans:
        days = np.array(sorted(spans))
        schema.generator[encode.DAY_DATES] = encode.spans_as_dates(
            days, np.array([spans[d][0] for d in days]), np.array([spans[d][1] for d in days]))


def add_spans(spans: dict[int, list[int]], day: np.ndarray, ts: np.ndarray) -> None:
    """Widen each day's [first, last] second by a partition's rows (``day`` non-decreasing)."""
    present, start = np.unique(day, return_index=True)
    for d, lo, hi in zip(present.tolist(), np.minimum.reduceat(ts, start).tolist(),
                         np.maximum.reduceat(ts, start).tolist(), strict=True):
        span = spans.setdefault(d, [lo, hi])
        span[0], span[1] = min(span[0], lo), max(span[1], hi)


def _groups(scan: _Scan, spill: Path, group_rows: int) -> Iterator[dict]:
    """The spilled rows, a group of consecutive dates at a time (in date order; at most
    ``group_rows`` rows, or one larger date): each group's segments are loaded once the group
    reaches their first date, the rows of later dates kept for the next groups."""
    segments = sorted(scan.segments, key=lambda s: (s.first, s.chunk))
    pending: list[dict] = []
    k = 0
    dates = sorted(scan.dates)
    i = 0
    while i < len(dates):
        held, j = scan.dates[dates[i]], i + 1
        while j < len(dates) and held + scan.dates[dates[j]] <= group_rows:
            held += scan.dates[dates[j]]
            j += 1
        last = dates[j - 1]
        while k < len(segments) and segments[k].first <= last:
            path = spill / f"{segments[k].chunk:08d}.pkl"
            with open(path, "rb") as f:
                pending.append(pickle.load(f))
            path.unlink()
            k += 1
        group, later = [], []
        for part in pending:  # each part is sorted by date
            cut = int(np.searchsorted(part[DATE_KEY], last, side="right"))
            if cut:
                group.append(_slice(part, 0, cut) if cut < len(part[DATE_KEY]) else part)
            if cut < len(part[DATE_KEY]):
                later.append(_slice(part, cut, len(part[DATE_KEY])))
        pending = later
        yield _concat(group)
        i = j


def _encode(rows: dict, date: int | np.ndarray, plan: _Plan, m: Mapping, next_id: int,
            matched: dict[str, int]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A partition's rows (of local dates ``date``: one, or each row's) in time order → the
    flat columns (build._assemble's) and each history field's per-row event values (``t``:
    times in ns)."""
    t = rows["t"]
    n = len(t)
    cols: dict[str, np.ndarray] = {"example_id": np.arange(next_id, next_id + n, dtype=np.int64),
                                   "ts": t // 10**9}
    if plan.edges is None:
        assert plan.first is not None  # calendar days: the partition is one local date
        day = np.maximum(np.asarray(date, dtype=np.int64) - plan.first, 0)
        cols["day"] = np.broadcast_to(day, (n,)).astype(np.int32)
    else:
        cols["day"] = np.searchsorted(plan.edges, cols["ts"], side="right").astype(np.int32)
    if plan.domain is not None:
        uniq, table = plan.domain
        cols["domain"] = table[encode.codes_in(rows["domain"], uniq)]
    else:
        cols["domain"] = np.zeros(n, dtype=np.int16)
    cols["user_id"] = (_id_codes(rows["user"], m.user, plan.uniq.get("user"))
                       if m.user is not None else np.zeros(n, dtype=np.int64))
    if m.item is not None:
        cols["item_id"] = _id_codes(rows["item"], m.item, plan.uniq.get("item"))
    for c in m.categorical:
        v = rows[f"cat:{c.name}"]
        cols[c.name] = encode.log2_buckets(v)[0] if c.bucket else encode.codes_in(
            v, plan.uniq[c.name])
    cols.update({c.name: rows[f"dense:{c.name}"] for c in m.dense})
    for s, path, loaded in plan.side:
        joined = loaded.align(rows[f"on:{s.on}"])
        matched[str(path)] += int(round(joined.matched * n))
        cols.update({name: codes for name, (codes, _) in joined.categorical.items()})
        cols.update(joined.dense)
    cols.update({lab.name: rows[f"label:{lab.name}"] for lab in m.labels})
    events: dict[str, np.ndarray] = {"t": t}
    for f in m.history.fields if m.history else ():
        name = f"hist_{f.name}"
        if f.kind == "age":
            continue
        events[name] = (cols["item_id"] if f.kind == "item" else
                        cols["domain"] if f.kind == "domain" else
                        rows[f"level:{f.name}"] if f.kind == "levels" else
                        cols[f.ref or ""])
    return cols, events


def _id_codes(values: np.ndarray | pd.Series, ids: Ids, uniq: pd.Index | None) -> np.ndarray:
    if ids.ids == "raw":
        assert isinstance(values, np.ndarray)
        return values
    assert isinstance(values, pd.Series)
    if ids.ids == "dense":
        assert uniq is not None
        return encode.codes_in(values, uniq)
    assert ids.buckets is not None
    return encode.hashed(values, ids.buckets).codes


def _slices(day: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """Row ranges of at most a row group, each within one day (days never decrease)."""
    bounds = np.flatnonzero(np.r_[True, day[1:] != day[:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        for lo in range(int(a), int(b), ROW_GROUP_SIZE):
            yield lo, min(lo + ROW_GROUP_SIZE, int(b)), int(day[a])


def _day_tables(cols: dict[str, np.ndarray], arrow: pa.Schema, hist: Hist | None,
                fields: list[tuple[str, str]]) -> Iterator[tuple[int, pa.Table]]:
    """A partition's rows as tables of the dataset's schema, each within one day: built a row
    group at a time across days (a thin log's days hold a few rows each: one table of many
    days, sliced without a copy, not a table per day) and cut at the day boundaries."""
    day = cols["day"]
    for lo in range(0, len(day), ROW_GROUP_SIZE):
        hi = min(lo + ROW_GROUP_SIZE, len(day))
        table = _table(cols, lo, hi, arrow, hist, fields)
        for a, b, d in _slices(day[lo:hi]):
            yield d, table.slice(a, b - a)


def _table(cols: dict[str, np.ndarray], lo: int, hi: int, arrow: pa.Schema,
           hist: Hist | None, fields: list[tuple[str, str]]) -> pa.Table:
    """Rows ``[lo, hi)`` of a partition as a table of the dataset's schema, histories
    gathered for these rows only."""
    arrays = {f.name: pa.array(cols[f.name][lo:hi], type=f.type)
              for f in arrow if f.name in cols}
    if hist is not None:
        start, end, t, vals = hist
        lengths = end[lo:hi] - start[lo:hi]
        offsets, ev = gather_ranges(start[lo:hi], lengths)
        o = pa.array(offsets.astype(np.int32))
        ts = cols["ts"][lo:hi]
        for name, kind in fields:
            v = age_buckets(ts, lengths, t[ev] // 10**9) if kind == "age" else vals[name][ev]
            typ = arrow.field(name).type
            arrays[name] = pa.ListArray.from_arrays(o, pa.array(v, type=typ.value_type))
    return pa.Table.from_arrays([arrays[f.name] for f in arrow], schema=arrow)


def _concat(parts: list[dict]) -> dict:
    """Spilled pieces as one set of columns (in the pieces' order)."""
    if len(parts) == 1:
        return parts[0]
    return {k: (pd.concat([p[k] for p in parts], ignore_index=True)
                if isinstance(parts[0][k], pd.Series) else np.concatenate([p[k] for p in parts]))
            for k in parts[0]}


def _slice(rows: dict, a: int, b: int) -> dict:
    return {k: (v.iloc[a:b].reset_index(drop=True) if isinstance(v, pd.Series) else v[a:b])
            for k, v in rows.items()}


def _take(rows: dict, idx: np.ndarray) -> dict:
    return {k: (v.iloc[idx].reset_index(drop=True) if isinstance(v, pd.Series) else v[idx])
            for k, v in rows.items()}


def _epoch_day(iso: str) -> int:
    return int(np.datetime64(iso, "D").astype(np.int64))
