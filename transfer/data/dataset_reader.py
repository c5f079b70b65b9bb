"""Parquet dataset → jagged ``Batch`` stream (DESIGN §2.2).

The unit of work is one Parquet row group: it is read with column projection, validated with
vectorised checks, turned into numpy arrays once, and cut into batches by slicing (jagged
sequences stay values + offsets; nothing is padded on the host). Row groups are split across
DDP ranks and DataLoader workers; shuffling permutes row groups and rows within them, seeded by
``seed`` and the epoch.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import IterableDataset, get_worker_info

from gemkd.transfer.data import validate
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.dataset_writer import day_paths
from gemkd.transfer.data.ranges import gather_ranges
from gemkd.transfer.data.schema import (
    CATEGORICAL_TYPE,
    DENSE_TYPE,
    KEY_COLUMNS,
    LABEL_TYPE,
    ORACLE_TYPE,
    DatasetSchema,
    seq_type,
)
from gemkd.transfer.data.unit_cache import UNITS, UnitCache
from gemkd.transfer.errors import DataError
from gemkd.transfer.io import fs

#: the key of a cached unit's batches already cut, per batch size (:meth:`DatasetReader._cut`)
_CUTS = "_cut_batches"


@dataclass(frozen=True)
class Unit:
    """One row group of one file: the smallest piece a worker reads."""

    path: str | Path
    row_group: int
    first_row: int
    n_rows: int
    day: int = -1


@dataclass
class Projection:
    """Which feature columns to read (``None`` = all in the schema)."""

    categorical: list[str]
    dense: list[str]
    sequence: list[str]
    tasks: list[str]
    oracle: bool

    def expected_types(self, schema: DatasetSchema) -> dict[str, pa.DataType]:
        types: dict[str, pa.DataType] = dict(KEY_COLUMNS)
        types.update({c: CATEGORICAL_TYPE for c in self.categorical if c not in types})
        types.update({c: DENSE_TYPE for c in self.dense})
        types.update({c: seq_type(c) for c in self.sequence})
        types.update({t: LABEL_TYPE for t in self.tasks})
        if self.oracle:
            types.update({schema.oracle[t]: ORACLE_TYPE for t in self.tasks})
        return types


def _pick(kind: str, wanted: list[str] | None, available: list[str]) -> list[str]:
    if wanted is None:
        return list(available)
    unknown = [w for w in wanted if w not in available]
    if unknown:
        raise DataError(f"unknown {kind} {unknown[0]!r}; the dataset has: {', '.join(available)}")
    return list(wanted)


class DatasetReader(IterableDataset):
    """Iterate a gemkd dataset as ``Batch`` objects, one row group at a time.

    Parameters
    ----------
    root
        The dataset (a directory or an s3:// URI).
    days
        The half-open day range ``(first, end)`` (None: every day).
    batch_size
        Rows per batch; a batch never spans two row groups.
    shuffle, seed
        Permute row groups and rows by ``seed`` and the epoch.
    max_seq_len
        Keep the most recent events of longer histories (None: all).
    categorical, dense, sequence, tasks
        The columns read (None: the schema's); an unknown name is a DataError.
    oracle
        Also read the true probabilities where the data has them.
    domains
        Keep only these domains' rows (names; None: all): a vertical model's own traffic.
    rank, world_size
        This process's share of the row groups (None: the initialised process group's).
    cache
        Keep the decoded row groups in the process (:mod:`gemkd.transfer.data.unit_cache`) so the
        next pass over them (the next student of a sweep) reads from memory.
    stream
        With ``shuffle``, keep the days in time order (row groups and rows shuffled within each
        day only): one time-ordered pass, as a recurring production model trains.

    A pass holds one row group's arrays (nothing per row of the dataset). Batches are views of
    them, so a consumer that keeps a batch while asking for the next holds that row group too
    while the next is read: a whole pass then peaks at two row groups (``validate`` drops each
    batch at once: one).

    Raises
    ------
    DataError
        A bad option, or a file, column or row that breaks the schema, named.
    """

    def __init__(self, root: str | Path, days: tuple[int, int] | None = None,
                 batch_size: int = 4096, shuffle: bool = False, seed: int = 0,
                 max_seq_len: int | None = None, categorical: list[str] | None = None,
                 dense: list[str] | None = None, sequence: list[str] | None = None,
                 tasks: list[str] | None = None, oracle: bool = True,
                 domains: list[str] | None = None,
                 rank: int | None = None, world_size: int | None = None,
                 cache: bool = False, stream: bool = False) -> None:
        super().__init__()
        if batch_size < 1:
            raise DataError(f"batch_size must be >= 1, got {batch_size}")
        if max_seq_len is not None and max_seq_len < 0:
            raise DataError(f"max_seq_len must be >= 0, got {max_seq_len}")
        self.root = fs.as_where(root)
        self.schema = DatasetSchema.load(self.root)
        s = self.schema
        self.projection = Projection(
            categorical=_pick("categorical feature", categorical, [f.name for f in s.categorical]),
            dense=_pick("dense feature", dense, s.dense),
            sequence=_pick("sequence field", sequence, [f.name for f in s.sequence]),
            tasks=_pick("task", tasks, s.tasks),
            oracle=oracle and bool(s.oracle),
        )
        self.days = self._select_days(days)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.max_seq_len = max_seq_len
        self.domain_ids = None if domains is None else np.array(
            [self._domain_id(d) for d in domains], dtype=np.int64)
        self.epoch = 0
        self.cache, self.stream = cache, stream
        self._rank, self._world_size = rank, world_size
        self.units = self._scan_units()

    # ---- discovery -------------------------------------------------------------------------
    def _select_days(self, days: tuple[int, int] | None) -> list[int]:
        all_days = sorted(self.schema.days)
        if days is None:
            return all_days
        first, end = days
        chosen = [d for d in all_days if first <= d < end]
        if not chosen:
            raise DataError(
                f"{self.root}: no days in [{first}, {end}); the dataset has days "
                f"{all_days[0]}..{all_days[-1]}"
            )
        return chosen

    def _scan_units(self) -> list[Unit]:
        expected = self.projection.expected_types(self.schema)
        units = []
        for day in self.days:
            paths = day_paths(self.root, day)
            total = 0
            for path in paths:
                pf = validate.open_parquet(path)
                validate.check_columns(path, pf.schema_arrow, expected)
                meta = pf.metadata
                if meta.num_rows == 0:
                    raise DataError(f"{path}: no rows")
                row = 0  # within this file: errors name the file's own row
                for rg in range(meta.num_row_groups):
                    n = meta.row_group(rg).num_rows
                    units.append(Unit(path, rg, row, n, day))
                    row += n
                total += row
            listed = self.schema.rows_per_day.get(str(day))
            if listed is not None and listed != total:
                where = (paths[0] if len(paths) == 1 else
                         f"{fs.parent(paths[0])} ({len(paths)} part files)")
                raise DataError(f"{where}: has {total} rows, schema.json says {listed} "
                                f"(file replaced or partly written after the dataset was made)")
        return units

    @property
    def num_rows(self) -> int:
        return sum(u.n_rows for u in self.units)

    @property
    def columns(self) -> list[str]:
        return list(self.projection.expected_types(self.schema))

    # ---- iteration -------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _shard(self) -> tuple[int, int]:
        rank, world = self._rank, self._world_size
        if rank is None or world is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank, world = dist.get_rank(), dist.get_world_size()
            else:
                rank, world = 0, 1
        info = get_worker_info()
        if info is None:
            return rank, world
        return rank * info.num_workers + info.id, world * info.num_workers

    def my_units(self) -> list[Unit]:
        units = list(self.units)
        if self.shuffle and self.stream:
            # days in order, row groups shuffled within their day, each day by its own draw:
            # a pass over [a, c) orders day b's rows as a pass over [b, c) does (continuation)
            by_day: dict[int, list[Unit]] = {}
            for u in units:
                by_day.setdefault(u.day, []).append(u)
            units = [day[i] for d in sorted(by_day) for day in (by_day[d],)
                     for i in np.random.default_rng([self.seed, self.epoch, d])
                     .permutation(len(day))]
        elif self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch])
            units = [units[i] for i in rng.permutation(len(units))]
        shard, n_shards = self._shard()
        return units[shard::n_shards]

    def __iter__(self) -> Iterator[Batch]:
        rng = np.random.default_rng([self.seed, self.epoch, *self._shard()])
        open_path, pf = None, None
        for unit in self.my_units():
            key = self._cache_key(unit)
            arrays = UNITS.get(key)
            if arrays is None:
                if unit.path != open_path:  # row groups of one file share its parsed footer
                    open_path, pf = unit.path, validate.open_parquet(unit.path)
                arrays = self._load(unit, pf)
                UNITS.put(key, arrays)
            if key is not None and not self.shuffle:
                # in time order the cut is the same every pass: kept with the unit's arrays
                yield from (b.copy() for b in self._cut(arrays))
                continue
            n = len(arrays["example_id"])
            if self.shuffle and self.stream:  # a row group's own draw (see my_units)
                rng = np.random.default_rng([self.seed, self.epoch, *self._shard(), unit.day,
                                             unit.row_group])
            order = rng.permutation(n) if self.shuffle else None
            for start in range(0, n, self.batch_size):
                stop = min(start + self.batch_size, n)
                rows = order[start:stop] if order is not None else slice(start, stop)
                yield self._batch(arrays, rows)

    def _cut(self, arrays: dict) -> list[Batch]:
        """The unshuffled batches of a cached unit, cut once per batch size and kept in its
        cache entry: a sweep's next student then takes them as they are (its loader cost
        ~50 us a batch, a few % of a small student's step). Their tensors are views of the
        entry's (frozen) arrays, all but ``seq_offsets`` (one int64 a row), so keeping them
        costs little beyond what the entry already holds. They are made outside inference mode
        whatever pass cuts them (an evaluation's tensors could not be used by a later fit)."""
        cuts = arrays.setdefault(_CUTS, {})
        if self.batch_size not in cuts:
            n = len(arrays["example_id"])
            with torch.inference_mode(False):
                cuts[self.batch_size] = [
                    self._batch(arrays, slice(start, min(start + self.batch_size, n)))
                    for start in range(0, n, self.batch_size)]
        return cuts[self.batch_size]

    def in_memory(self) -> bool:
        """Whether a pass of this process reads nothing from disk and cuts no batch: a cached,
        unshuffled reader whose every row group has been through a pass already (then a
        background prefetch thread has nothing to overlap with the step)."""
        if not self.cache or self.shuffle:
            return False
        for unit in self.my_units():
            arrays = UNITS.get(self._cache_key(unit))
            if arrays is None or self.batch_size not in arrays.get(_CUTS, {}):
                return False
        return True

    def _cache_key(self, unit: Unit) -> tuple | None:
        """Where ``cache`` is on, the key of the unit's decoded arrays in the process cache."""
        if not self.cache:
            return None
        domains = None if self.domain_ids is None else tuple(self.domain_ids.tolist())
        p = self.projection
        columns = (tuple(p.categorical), tuple(p.dense), tuple(p.sequence), tuple(p.tasks),
                   p.oracle)
        return UnitCache.key(unit.path, unit.row_group, columns, domains, self.max_seq_len)

    # ---- conversion ------------------------------------------------------------------------
    def _load(self, unit: Unit, pf: pq.ParquetFile) -> dict:
        """Read, validate and convert one row group into numpy arrays."""
        p = self.projection
        try:
            table = pf.read_row_group(unit.row_group, columns=self.columns)
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"{unit.path}: row group {unit.row_group} unreadable "
                            f"({validate._short(e)})") from None
        validate.check_no_nulls(unit.path, table, unit.first_row)

        def col(name: str) -> np.ndarray:
            return table.column(name).chunk(0).to_numpy() if table.column(name).num_chunks == 1 \
                else table.column(name).to_numpy()

        out: dict = {k: col(k) for k in KEY_COLUMNS}
        validate.check_non_negative(unit.path, "user_id", out["user_id"], unit.first_row)
        validate.check_non_negative(unit.path, "domain", out["domain"], unit.first_row)
        validate.check_below(unit.path, "domain", out["domain"], len(self.schema.domains),
                             "domains", unit.first_row)
        cats = []
        for name in p.categorical:
            values = out[name] if name in out else col(name)
            validate.check_non_negative(unit.path, name, values, unit.first_row)
            cats.append(values)
        out["categorical"] = (np.stack(cats, axis=1) if cats
                              else np.zeros((unit.n_rows, 0), dtype=np.int64))
        out["dense"] = (np.stack([col(c) for c in p.dense], axis=1) if p.dense
                        else np.zeros((unit.n_rows, 0), dtype=np.float32))
        labels = []
        for t in p.tasks:
            values = col(t)
            validate.check_binary(unit.path, t, values, unit.first_row)
            labels.append(values)
        out["labels"] = np.stack(labels, axis=1).astype(np.float32)
        if p.oracle:
            out["oracle"] = np.stack([col(self.schema.oracle[t]) for t in p.tasks], axis=1)
        # int64 once per row group (what a Batch holds): a batch's tensors are then views
        out["domain"] = out["domain"].astype(np.int64)
        out["day"] = out["day"].astype(np.int64)
        rows = (None if self.domain_ids is None
                else np.flatnonzero(np.isin(out["domain"], self.domain_ids)))
        out["offsets"], out["seq"] = self._sequences(unit, table, rows)
        if rows is not None:
            out = {k: (v if k in ("offsets", "seq") else v[rows]) for k, v in out.items()}
        return out

    def _sequences(self, unit: Unit, table: pa.Table, rows: np.ndarray | None
                   ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Offsets ``[R+1]`` and the event values of the rows ``rows`` (all: None), each history
        cut to its ``max_seq_len`` most recent events — gathered with one index per row group,
        so the events a student never reads (other domains' rows, older events) are not copied
        (every event is still checked: one vectorised pass)."""
        p = self.projection
        offsets, values = None, {}
        for name in p.sequence:
            arr = table.column(name).combine_chunks()
            o = arr.offsets.to_numpy().astype(np.int64)
            validate.check_no_null_events(unit.path, name, arr.values, o, unit.first_row)
            if offsets is None:
                offsets = o
            elif not np.array_equal(o, offsets):
                bad = int(np.argmax(o != offsets))
                raise DataError(f"{unit.path}: column {name!r} row {unit.first_row + bad - 1}: "
                                f"length differs from {p.sequence[0]!r} (event fields must align)")
            values[name] = v = arr.values.to_numpy()
            validate.check_non_negative(unit.path, name, v[o[0]:o[-1]], unit.first_row, o - o[0])
        n = unit.n_rows if rows is None else len(rows)
        if offsets is None:
            return np.zeros(n + 1, dtype=np.int64), {}
        starts, ends = offsets[:-1], offsets[1:]
        if rows is not None:
            starts, ends = starts[rows], ends[rows]
        if self.max_seq_len is not None:
            starts = np.maximum(starts, ends - self.max_seq_len)
        if rows is None and np.array_equal(starts, offsets[:-1]):  # every event: views, no copy
            lo, hi = offsets[0], offsets[-1]
            new, take = offsets - lo, (lambda v: v[lo:hi])  # noqa: E731
        else:
            new, idx = gather_ranges(starts, ends - starts)
            take = (lambda v: v[idx])  # noqa: E731
        return new, {name: take(v) for name, v in values.items()}

    def _domain_id(self, name: str) -> int:
        if name not in self.schema.domains:
            raise DataError(f"{self.root}: unknown domain {name!r}; the dataset has: "
                            f"{', '.join(self.schema.domains)}")
        return self.schema.domains.index(name)

    def _batch(self, a: dict, rows: slice | np.ndarray) -> Batch:
        o = a["offsets"]
        if isinstance(rows, slice):
            lo, hi = o[rows.start], o[rows.stop]
            offsets = o[rows.start:rows.stop + 1] - lo
            seq = {k: v[lo:hi] for k, v in a["seq"].items()}
        else:
            offsets, idx = _gather_offsets(o, rows)
            seq = {k: v[idx] for k, v in a["seq"].items()}
        lengths = np.diff(offsets)
        with warnings.catch_warnings():
            # Arrow buffers are read-only; batches are inputs and are never written in place.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return self._tensors(a, rows, offsets, seq, lengths)

    @staticmethod
    def _tensors(a: dict, rows, offsets: np.ndarray, seq: dict, lengths: np.ndarray) -> Batch:
        t = torch.from_numpy
        return Batch(
            dense=t(np.ascontiguousarray(a["dense"][rows])),
            categorical=t(np.ascontiguousarray(a["categorical"][rows])),
            seq_values={k: t(np.ascontiguousarray(v)) for k, v in seq.items()},
            seq_offsets=t(np.ascontiguousarray(offsets)),
            seq_max_len=int(lengths.max()) if len(lengths) else 0,
            labels=t(np.ascontiguousarray(a["labels"][rows])),
            domain=t(np.ascontiguousarray(a["domain"][rows], dtype=np.int64)),
            example_id=t(np.ascontiguousarray(a["example_id"][rows])),
            user_id=t(np.ascontiguousarray(a["user_id"][rows])),
            day=t(np.ascontiguousarray(a["day"][rows], dtype=np.int64)),
            ts=t(np.ascontiguousarray(a["ts"][rows])),
            oracle=t(np.ascontiguousarray(a["oracle"][rows])) if "oracle" in a else None,
        )


def _gather_offsets(offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and value indices of the segments ``rows``, in that order."""
    starts = offsets[rows]
    return gather_ranges(starts, offsets[rows + 1] - starts)
