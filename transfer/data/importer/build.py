"""``gemkd data import``: any time-stamped event log + a mapping → the gemkd dataset schema.

One example per log row. Rows are sorted by time (stable: ties keep file order, files in name
order), numbered densely in that order, and split into days (calendar dates in a timezone, or
equal-count time buckets). A user's history is their rows strictly before the row's time (ties
excluded), so an event is in a history only once it has happened and its feedback is known.
With ``negatives``, each logged row is followed by rows of sampled items its user had not
engaged with (``negatives.py``); they are marked ``sampled`` and are in no history.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemkd.transfer.config import check_value
from gemkd.transfer.data import vocabulary
from gemkd.transfer.data.importer import (
    encode,
    id_vocab,
    log_checks,
    negatives,
    sides,
    source,
    stream,
    times,
)
from gemkd.transfer.data.importer.item_age import item_age_caveat
from gemkd.transfer.data.importer.mapping import Ids, Mapping
from gemkd.transfer.data.importer.write import Events, write_dataset
from gemkd.transfer.data.ranges import N_AGE_BUCKETS, equal_count_days
from gemkd.transfer.data.schema import SAMPLED_COLUMN, SCHEMA_FILE, DatasetSchema, Feature
from gemkd.transfer.errors import ConfigError, DataError
from gemkd.transfer.io.publish import output_directory
from gemkd.transfer.options import ImportEngine

log = logging.getLogger(__name__)


@dataclass
class ImportResult:
    """The schema written and what was left out on the way (missing optional inputs)."""

    schema: DatasetSchema
    notes: list[str] = field(default_factory=list)


def import_logs(src: str | Path, mapping: Mapping, out: str | Path,
                overwrite: bool = False, notes: list[str] | None = None,
                streaming: bool = True, batch_rows: int = stream.BATCH_ROWS,
                part_rows: int = stream.PART_ROWS, engine: ImportEngine = "local"
                ) -> ImportResult:
    """Write time-stamped log(s) as a gemkd dataset, atomically (``gemkd data import``).

    Parameters
    ----------
    src
        A log file, or a directory searched with ``mapping.files``; side-table paths are
        relative to that directory.
    mapping
        How the log's columns become the dataset's (:func:`load_mapping`).
    out
        The dataset directory.
    overwrite
        Replace a dataset already at ``out``.
    notes
        Notes to carry into the result (e.g. a preset's adaptations).
    streaming
        True (default): two passes of ``batch_rows`` rows at a time, memory bounded by the
        largest day, days written in part files of ``part_rows`` rows (``stream.py``); a
        mapping with ``negatives`` is always imported in memory. False: the whole log at once.
        Both write the same dataset.
    batch_rows, part_rows
        The streaming passes' batch and a day's part-file size, in rows.
    engine
        ``local`` (default): this process. ``ray``: the streaming passes as tasks on the Ray
        cluster at ``RAY_ADDRESS`` (or a local instance; ``stream_ray.py``), writing the same
        bytes; ``out`` must be on storage every node reads.

    Returns
    -------
    ImportResult
        The schema written and notes on what was left out (missing optional inputs).

    Raises
    ------
    DataError
        Naming the file, column and row of a bad log.
    ConfigError
        ``engine="ray"`` without Ray installed, or with an import that is not streamed
        (``streaming=False``, a mapping with ``negatives``).
    """
    check_value(engine, ImportEngine, "engine")
    if engine == "ray" and (not streaming or mapping.negatives is not None):
        why = ("the mapping has negatives, which are sampled over the whole log in memory"
               if streaming else "the import is in memory (streaming=False, --in-memory)")
        raise ConfigError(f"engine 'ray' runs the streaming import, but {why}; use engine "
                          "'local'")
    src = Path(src)
    notes = list(notes or [])
    base = src if src.is_dir() else src.parent
    started = time.perf_counter()
    with output_directory(out, overwrite=overwrite, last=(SCHEMA_FILE,)) as tmp:
        side = sides.resolve(mapping, base, notes)
        files = source.find_files(src, mapping.files, {p.resolve() for _, p in side})
        if streaming and mapping.negatives is None:
            run = stream.import_streaming if engine == "local" else _import_ray
            schema = run(files, mapping, side, notes, tmp, _extract,
                         functools.partial(_check_header, m=mapping),
                         batch_rows=batch_rows, part_rows=part_rows)
            n = schema.n_rows
        else:
            raw = _in_range(_read_logs(files, mapping), mapping, notes)
            n = len(raw["t"])
            one_event = _whole_log_notes(raw, mapping, notes)
            order = np.argsort(raw["t"], kind="stable")
            rows = _take(raw, order)
            age = None
            if mapping.negatives is not None:
                rows, age = _add_negatives(rows, mapping, notes)
            schema, columns, events, vocabs = _assemble(rows, mapping, side, notes, one_event)
            schema.vocabularies = id_vocab.write(vocabs, tmp, mapping)
            log_checks.emit(notes, [log_checks.duplicate_note(log_checks.duplicates(raw), n)])
            if age is not None:
                assert schema.negatives is not None  # _assemble records the mapping's negatives
                schema.negatives["item_age"] = age
            write_dataset(schema, columns, events, tmp)
            if mapping.days.buckets is not None:
                schema.generator[encode.DAY_DATES] = encode.day_dates(columns["day"], columns["ts"])
        schema.generator = {"mapping": mapping.to_dict(), "files": [str(f) for f in files],
                            "side_tables": [str(p) for _, p in side], "notes": notes,
                            **{k: v for k, v in schema.generator.items() if k == encode.DAY_DATES}}
        schema.save(tmp)
    log.info("imported %d rows from %d file(s) in %.1f s", n, len(files),
             time.perf_counter() - started)
    return ImportResult(schema, notes)


def _import_ray(*args: Any, **kwargs: Any) -> DatasetSchema:
    from gemkd.transfer.data.importer.stream_ray import import_on_ray  # Ray: optional

    return import_on_ray(*args, **kwargs)


def log_columns(m: Mapping) -> dict[str, str]:
    """Every log column the mapping reads → the first mapping key that names it."""
    cols: dict[str, str] = {}
    refs = [(m.time.column, "time.column")]
    if m.days.date_column is not None:
        refs.append((m.days.date_column, "days.date_column"))
    refs += [(i.column, f"{i.key}.column") for i in (m.user, m.item) if i is not None]
    if m.domain is not None:
        refs.append((m.domain.column, "domain.column"))
    refs += [(lab.column, f"{lab.key}.column") for lab in m.labels]
    refs += [(c.column, f"{c.key}.column") for c in (*m.categorical, *m.dense)]
    for f in m.history.fields if m.history else ():
        refs += [(c, f.key) for level in f.levels for c in level]
    refs += [(s.on, f"{s.where}.on") for s in m.side_tables]
    for col, key in refs:
        cols.setdefault(col, key)
    return cols


def _check_header(path: Path, m: Mapping) -> list[str]:
    """The log columns the mapping reads, each checked to be in file ``path``; a CSV's rows
    each checked to have the header's number of fields."""
    wanted = log_columns(m)
    if m.columns is not None and not source.is_csv(path):
        raise ConfigError(f"{m.path}: key 'header': false is for CSV logs without a header "
                          f"line, and {path} is a Parquet file (its columns are named)")
    have = source.header(path, m.columns)
    for col, key in wanted.items():
        if col not in have:
            hint = ""
            if m.columns is None and source.is_csv(path) and source.looks_like_data(have):
                hint = ("; its first line looks like a row of data, not a header (numbers as "
                        "names): for a CSV without a header line give the mapping 'header: "
                        "false' and 'columns: [...]', the fields' names in order")
            raise ConfigError(f"{m.path}: key {key!r}: column {col!r} is not in {path} "
                              f"(its columns: {', '.join(have[:30])}){hint}")
    if source.is_csv(path):
        source.check_fields(path, m.columns)
    return list(wanted)


def _read_logs(files: list[Path], m: Mapping) -> dict[str, np.ndarray | pd.Series]:
    parts = []
    for path in files:
        df = source.read(path, _check_header(path, m), m.columns)
        if len(df):
            parts.append(_extract(df, path, m))
        log.info("%s: %d rows", path, len(df))
    if not parts:
        raise DataError(f"{', '.join(str(f) for f in files)}: no rows")
    return {k: (pd.concat([p[k] for p in parts], ignore_index=True)
                if isinstance(parts[0][k], pd.Series) else np.concatenate([p[k] for p in parts]))
            for k in parts[0]}


def _extract(df: pd.DataFrame, path: Path, m: Mapping) -> dict[str, np.ndarray | pd.Series]:
    """Check and convert one file's columns (so every error names this file)."""
    out: dict[str, np.ndarray | pd.Series] = {"t": times.time_ns(df[m.time.column], path,
                                                                  m.time)}
    if m.days.date_column is not None:
        out["date"] = source.dates(df[m.days.date_column], path, "days.date_column")
    for role, ids in (("user", m.user), ("item", m.item)):
        if ids is None:
            continue
        s = df[ids.column]
        if ids.ids != "raw":  # dense codes or hashes of any value (text too)
            if s.isna().any():
                i = int(np.argmax(s.isna().to_numpy()))
                raise DataError(f"{path}: column {ids.column!r} {source.place(path, i)}: "
                                f"empty id (mapping key {role!r})")
            out[role] = s
        else:
            out[role] = source.numbers(s, path, role, integer=True, non_negative=True)
    if m.domain is not None:
        out["domain"] = df[m.domain.column]
    for lab in m.labels:
        out[f"label:{lab.name}"] = source.label(df[lab.column], path, lab)
    for c in m.categorical:
        s = df[c.column]
        out[f"cat:{c.name}"] = (source.numbers(s, path, c.key, missing_ok=True) if c.bucket
                                else encode.first_item(s, c.split) if c.split else s)
    for c in m.dense:
        out[f"dense:{c.name}"] = sides.dense_values(df[c.column], path, c)
    for f in m.history.fields if m.history else ():
        if f.kind == "levels":
            level = np.zeros(len(df), dtype=np.int32)
            for i, cols in enumerate(f.levels):
                hit = np.zeros(len(df), dtype=bool)
                for col in cols:
                    hit |= source.binary(df[col], path, f.key).astype(bool)
                level[hit] = i + 1
            out[f"level:{f.name}"] = level
    for table in m.side_tables:
        out[f"on:{table.on}"] = df[table.on]
    return out


def _in_range(rows: dict, m: Mapping, notes: list[str]) -> dict:
    """The rows whose local date is in the mapping's ``days`` range (``from``/``to``, inclusive);
    the rows left out before and after it are counted in a note."""
    first, last = m.days.first, m.days.last
    if first is None and last is None:
        return rows
    assert m.days.calendar is not None  # parse_mapping: a range only with calendar days
    date = encode.local_dates(rows["t"], m.days.calendar)
    lo = date < _epoch_day(first) if first else np.zeros(len(date), dtype=bool)
    hi = date > _epoch_day(last) if last else np.zeros(len(date), dtype=bool)
    keep = ~(lo | hi)
    span = f"{first or 'the first date'} to {last or 'the last date'} ({m.days.calendar})"
    if not keep.any():
        raise DataError(f"{m.path}: key 'days': no row of the log is dated {span}: its rows "
                        f"run from {_iso(date.min())} to {_iso(date.max())}")
    if keep.all():
        return rows
    note = (f"days: kept the {int(keep.sum()):,} rows dated {span}; left out "
            f"{int(lo.sum()):,} rows before it and {int(hi.sum()):,} after it")
    notes.append(note)
    log.info(note)
    return _take(rows, np.flatnonzero(keep))


def _epoch_day(iso: str) -> int:
    return int(np.datetime64(iso, "D").astype(np.int64))


def _iso(day: int) -> str:
    return str(np.datetime64(int(day), "D"))


def _take(rows: dict, idx: np.ndarray) -> dict:
    """Every column's rows ``idx``, in that order."""
    return {k: _at(v, idx) for k, v in rows.items()}


def _at(v: np.ndarray | pd.Series, idx: np.ndarray) -> np.ndarray | pd.Series:
    return v.iloc[idx].reset_index(drop=True) if isinstance(v, pd.Series) else v[idx]


def _add_negatives(rows: dict, m: Mapping, notes: list[str]) -> tuple[dict, dict[str, float]]:
    """Rows in time order → the same with each logged row followed by its sampled negatives:
    the positive's time, user, domain and log features; the sampled item with its item
    side-table features; every label 0 and ``sampled`` = 1. Also the item-age check (the
    share of positives and of negatives on new items), noted and warned of when they differ."""
    started = time.perf_counter()
    neg, item = m.negatives, m.item
    assert neg is not None and item is not None  # the caller's check; parse_mapping's for item
    logged = negatives.Log.build(rows["user"], rows["item"], rows["t"])
    drawn = negatives.sample(logged, neg)
    src, item_src, sampled = negatives.expand_index(drawn, logged.first_rows())
    item_keys = {"item", *(f"on:{s.on}" for s in m.side_tables if s.on == item.column)}
    out = {k: _at(v, item_src if k in item_keys else src) for k, v in rows.items()}
    for k in out:
        if k.startswith(("label:", "level:")):
            out[k][sampled == 1] = 0
    out[SAMPLED_COLUMN] = sampled
    n, none = len(drawn), int((drawn < 0).all(axis=1).sum())
    if none:
        notes.append(f"negatives: {none} of {n} logged rows got none (every item available by "
                     "then was one their user had engaged with)")
    unlabelled = int(np.all([rows[f"label:{lab.name}"] == 0 for lab in m.labels], axis=0).sum())
    if unlabelled:
        notes.append(f"negatives: {unlabelled} of {n} logged rows have every label 0; they "
                     "still count as engagements (their items are not their user's negatives "
                     "from then on)")
    age = negatives.item_age(logged, drawn, neg.new_item_hours)
    caveat = item_age_caveat({"item_age": age})
    if caveat:
        notes.append(f"negatives: {caveat}")
        log.warning("negatives: %s", caveat)
    log.info("sampled %d negatives for %d rows in %.1f s", len(src) - n, n,
             time.perf_counter() - started)
    return out, age


def _whole_log_notes(rows: dict, m: Mapping, notes: list[str]) -> float | None:
    """The checks of the log as a whole (log_checks): a label that never holds is an error;
    notes on labels that always hold and on one user holding most rows. Returns the share of
    users with one event (None without users), for the thin-days note."""
    n = len(rows["t"])
    positives = {lab.name: int(rows[f"label:{lab.name}"].sum(dtype=np.int64))
                 for lab in m.labels}
    new: list[str | None] = list(log_checks.check_labels(m, positives, n,
                                                         m.negatives is not None))
    one_event = None
    if m.user is not None:
        codes, uniq = encode.factorize(pd.Series(rows["user"]))
        counts = np.bincount(codes, minlength=len(uniq) + 1)[1:]
        new += log_checks.user_notes(counts, uniq, n)
        new.append(log_checks.one_event_note(counts, m.days.buckets is not None))
        one_event = log_checks.one_event_share(counts)
    log_checks.emit(notes, new)
    return one_event


def _check_days(day: np.ndarray, rows: dict, calendar: str, first: int | None,
                notes: list[str], one_event: float | None = None) -> None:
    """Notes and warnings on thin days, straggler days and gaps, counted over the logged
    rows."""
    logged = day if SAMPLED_COLUMN not in rows else day[rows[SAMPLED_COLUMN] == 0]
    if first is None:
        first = int(encode.local_dates(rows["t"][:1], calendar)[0])  # rows are in time
    present, counts = np.unique(logged, return_counts=True)
    log_checks.emit(notes, list(log_checks.day_notes(present, counts, first, one_event)))


def _ids(values: np.ndarray | pd.Series, ids: Ids, notes: list[str]
         ) -> tuple[np.ndarray, int, vocabulary.Vocabulary]:
    """An id column's table rows, their count and its vocabulary, by the mapping's ``ids``
    (mapping.Ids)."""
    if ids.ids == "raw":
        assert isinstance(values, np.ndarray)  # _extract checked them as integers >= 0
        return values, int(values.max()) + 1, vocabulary.rule_only("raw", id_vocab.id_source(ids))
    assert isinstance(values, pd.Series)  # _extract keeps ids to code as read
    if ids.ids == "dense":
        c, uniq = encode.factorize(values)
        return c, len(uniq) + 1, vocabulary.dense(uniq, id_vocab.id_source(ids))
    assert ids.buckets is not None  # parse_mapping: hash comes with buckets
    h = encode.hashed(values, ids.buckets)
    note = encode.hash_note(ids.key, ids.buckets, h)
    notes.append(note)
    log.info(note)
    return h.codes, h.cardinality, vocabulary.hashed(values, ids.buckets, id_vocab.id_source(ids))


def _assemble(rows: dict, m: Mapping, side: list, notes: list[str],
              one_event: float | None = None
              ) -> tuple[DatasetSchema, dict[str, np.ndarray], Events,
                         dict[str, vocabulary.Vocabulary]]:
    """Rows in time order → the schema, the flat columns, the history's event fields and each
    encoded column's vocabulary."""
    t = rows["t"]
    vocabs: dict[str, vocabulary.Vocabulary] = {}
    n = len(t)
    cols: dict[str, np.ndarray] = {"example_id": np.arange(n, dtype=np.int64),
                                   "ts": t // 10**9}
    if m.days.calendar is not None:
        first = (int(rows["date"].min()) if "date" in rows else
                 _epoch_day(m.days.first) if m.days.first else None)
        cols["day"] = encode.calendar_days(t, m.days.calendar, first)
        _check_days(cols["day"], rows, m.days.calendar, first, notes, one_event)
    else:
        assert m.days.buckets is not None  # parse_mapping: exactly one of calendar and buckets
        cols["day"] = equal_count_days(cols["ts"], m.days.buckets)
    if m.domain is not None:
        where = f"{m.path}: key 'domain' (column {m.domain.column!r})"
        raw, uniq = encode.factorize(rows["domain"])  # encode.group_domains, table kept
        table, domains = encode.domain_table(uniq, np.bincount(raw, minlength=len(uniq) + 1),
                                             m.domain.min_share, m.domain.prefix, where)
        cols["domain"] = table[raw]
        vocabs["domain"] = vocabulary.domain(uniq, table, id_vocab.domain_source(m))
    else:
        cols["domain"], domains = np.zeros(n, dtype=np.int16), ["all"]
    categorical: list[Feature] = []
    if m.user is not None:
        cols["user_id"], card, vocabs["user_id"] = _ids(rows["user"], m.user, notes)
        categorical.append(Feature("user_id", card))
    else:
        cols["user_id"] = np.zeros(n, dtype=np.int64)
    if m.item is not None:
        cols["item_id"], card, vocabs["item_id"] = _ids(rows["item"], m.item, notes)
        categorical.append(Feature("item_id", card))
    for c in m.categorical:
        v = rows[f"cat:{c.name}"]
        if c.bucket:
            cols[c.name], card = encode.log2_buckets(v)
        else:
            cols[c.name], uniq = encode.factorize(v)
            card = len(uniq) + 1
        vocabs[c.name] = id_vocab.categorical_vocabulary(c, None if c.bucket else uniq)
        categorical.append(Feature(c.name, card))
    dense = [c.name for c in m.dense]
    cols.update({c.name: rows[f"dense:{c.name}"] for c in m.dense})
    for s, path in side:
        loaded = sides.load(m, s, path)
        joined = loaded.align(rows[f"on:{s.on}"])
        vocabs.update(loaded.vocab)
        if joined.matched == 0:
            notes.append(f"side table {path}: no log row matched its key {s.key!r} "
                         f"(log column {s.on!r}); its features are all 0")
        for name, (codes, card) in joined.categorical.items():
            cols[name] = codes
            categorical.append(Feature(name, card))
        cols.update(joined.dense)
        dense += list(joined.dense)
    tasks = [lab.name for lab in m.labels]
    cols.update({lab.name: rows[f"label:{lab.name}"] for lab in m.labels})
    if SAMPLED_COLUMN in rows:
        cols[SAMPLED_COLUMN] = rows[SAMPLED_COLUMN]
    cards = {f.name: f.cardinality for f in categorical}
    sequence, fields = [], {}
    for f in m.history.fields if m.history else ():
        name = f"hist_{f.name}"
        if f.kind == "age":
            values, card = None, N_AGE_BUCKETS  # relative to the reading row: computed later
        elif f.kind == "item":
            values, card = cols["item_id"], cards["item_id"]
        elif f.kind == "domain":
            values, card = cols["domain"], len(domains)
        elif f.kind == "label":
            assert f.ref is not None  # parse_mapping: a label field names its label
            values, card = cols[f.ref], 2
        elif f.kind == "feature":
            assert f.ref is not None  # parse_mapping: a feature field names its feature
            values, card = cols[f.ref], cards[f.ref]
        else:  # levels
            values, card = rows[f"level:{f.name}"], len(f.levels) + 1
        fields[name] = values
        sequence.append(Feature(name, card))
    schema = DatasetSchema(
        source=m.source, categorical=categorical, dense=dense, sequence=sequence, tasks=tasks,
        domains=domains, days=sorted(int(d) for d in np.unique(cols["day"])),
        max_history=m.history.max_events if m.history else 0,
        negatives=None if m.negatives is None else m.negatives.to_dict())
    events = Events(user=cols["user_id"], t=t, fields=fields,
                    max_events=m.history.max_events if m.history else 0,
                    logged=rows[SAMPLED_COLUMN] == 0 if SAMPLED_COLUMN in rows else None)
    return schema, cols, events, vocabs

