"""Turning raw column values into what the schema stores: dense codes, buckets, domains, days."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gemkd.transfer.errors import DataError

OTHER = "other"
ALL = "all"  # a single-domain dataset's one domain; every metric's all-domains row beside others
MAX_DOMAINS = np.iinfo(np.int16).max


def codes(values: pd.Series) -> tuple[np.ndarray, int]:
    """Dense codes ``1..K`` in sorted value order, ``0`` for a missing value; and ``K + 1``.

    Sorted order keeps ordered categories (buckets, small integers) in order; 0 is reserved so
    an unknown or missing value (e.g. an item absent from its side table) has an id of its own.
    """
    c, uniq = _factorize(values)
    return c, len(uniq) + 1


def _factorize(values: pd.Series) -> tuple[np.ndarray, pd.Index]:
    try:
        c, uniq = pd.factorize(values, sort=True)
    except TypeError:  # numbers from one file, text from another: compare as text
        c, uniq = pd.factorize(values.astype("string"), sort=True)
    return (c + 1).astype(np.int64), pd.Index(uniq)


@dataclass(frozen=True)
class Hashed:
    """Hashed ids: ``codes`` ``1..buckets`` per row, and how many distinct ids share a bucket."""

    codes: np.ndarray
    cardinality: int
    distinct: int
    shared: int  # distinct ids whose bucket holds another id too

    @property
    def collision_rate(self) -> float:
        return self.shared / self.distinct if self.distinct else 0.0


def hashed(values: pd.Series, buckets: int) -> Hashed:
    """``1 + hash(value) mod buckets`` per row (row 0 stays the missing/unknown row).

    The hash is of the value's text (SipHash, pandas' fixed key), so an id hashes alike whether
    a file typed it as a number or as text, and alike on every machine and run.
    """
    inverse, uniq = pd.factorize(values)
    text = pd.Index(uniq).astype(str).to_numpy(dtype=object)
    bucket = (pd.util.hash_array(text, categorize=False) % np.uint64(buckets)).astype(np.int64)
    per_bucket = np.unique(bucket, return_counts=True)[1]
    return Hashed(bucket[inverse] + 1, buckets + 1, len(uniq),
                  int(per_bucket[per_bucket > 1].sum()))


def first_item(values: pd.Series, sep: str) -> pd.Series:
    """The first item of a delimited list ("20,43" → "20"); empty → missing."""
    first = values.astype("string").str.split(sep, n=1).str[0].str.strip()
    return first.mask(first == "")


def log2_buckets(values: np.ndarray) -> tuple[np.ndarray, int]:
    """``1 + floor(log2(1 + x))`` for x >= 0, 0 for a missing or negative value; and the
    cardinality. Log buckets keep a heavy-tailed quantity (a duration) to ~20 ids."""
    ok = ~np.isnan(values) & (values >= 0)
    b = np.zeros(len(values), dtype=np.int64)
    b[ok] = np.floor(np.log2(1.0 + values[ok])).astype(np.int64) + 1
    return b, int(b.max(initial=0)) + 1


def value_name(v: object) -> str:
    """A value as a name: integral floats without ``.0`` (a column read with gaps is float)."""
    if isinstance(v, float | np.floating) and float(v).is_integer():
        return str(int(v))
    return str(v)


def group_domains(values: pd.Series, min_share: float, prefix: str, where: str
                  ) -> tuple[np.ndarray, list[str]]:
    """Domain ids (int16) and names: one domain per value with at least ``min_share`` of the rows,
    named ``prefix + value`` and ordered by descending share (ties: value order); the rarer
    values and missing ones form ``other``, always last."""
    raw, uniq = _factorize(values)  # 0 = missing
    table, domains = domain_table(uniq, np.bincount(raw, minlength=len(uniq) + 1), min_share,
                                  prefix, where)
    return table[raw], domains


def domain_table(uniq: pd.Index, counts: np.ndarray, min_share: float, prefix: str, where: str
                 ) -> tuple[np.ndarray, list[str]]:
    """:func:`group_domains` from the sorted values ``uniq`` and the rows of each code
    (``counts[0]``: missing values): the domain id of each code, and the domain names."""
    n = int(counts.sum())
    order = np.lexsort((np.arange(len(uniq)), -counts[1:])) + 1  # codes, by descending count
    names = [prefix + value_name(uniq[c - 1]) for c in order]
    kept = [(c, nm) for c, nm in zip(order, names, strict=True)
            if counts[c] / max(n, 1) >= min_share and nm != OTHER]
    if len(kept) >= MAX_DOMAINS:
        raise DataError(f"{where}: {len(kept)} domains, more than the int16 domain column "
                        "holds; raise min_share")
    table = np.full(len(uniq) + 1, len(kept), dtype=np.int16)  # default: other
    for i, (c, _) in enumerate(kept):
        table[c] = i
    domains = [nm for _, nm in kept]
    if len(kept) < len(order) or counts[0]:
        domains.append(OTHER)
    if ALL in domains and len(domains) > 1:
        renamed = ["d_" + d if d != OTHER else d for d in domains]
        raise DataError(f"{where}: a value names the domain {ALL!r} beside others {domains}, "
                        f"but {ALL!r} is reserved for every metric's all-domains row (a run "
                        "would refuse the dataset); set 'domain.prefix', e.g. prefix: \"d_\" "
                        f"names them {renamed}")
    return table, domains


def factorize(values: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Codes ``1..K`` (0: missing) and the sorted distinct values, compared as text when the
    values mix numbers and text (as :func:`codes` and :func:`group_domains` number them)."""
    return _factorize(values)


def as_compared(values: pd.Series, uniq: pd.Index) -> pd.Series:
    """``values`` as :func:`factorize` compared them to give ``uniq`` (text if it fell back)."""
    if pd.api.types.is_string_dtype(uniq.dtype) and not pd.api.types.is_string_dtype(values):
        return values.astype("string")
    return values


def codes_in(values: pd.Series, uniq: pd.Index) -> np.ndarray:
    """The codes ``1..K`` of ``values`` in the sorted distinct values ``uniq`` of every batch
    (what :func:`codes` gives on all rows at once); 0 for a missing value."""
    idx = uniq.get_indexer(as_compared(values, uniq))
    return (idx + 1).astype(np.int64)


def calendar_days(t_ns: np.ndarray, timezone: str, first: int | None = None) -> np.ndarray:
    """Day index: the local calendar date in ``timezone``, counted from the first date.

    ``first`` (days since 1970-01-01) overrides day 0: a log cut by its own date column can hold
    a few rows that the clock puts on the day before its first date (KuaiRand dates a row by a
    rounded hour); they join day 0 rather than form a tiny day of their own.
    """
    date = local_dates(t_ns, timezone)
    return np.maximum(date - (date.min() if first is None else first), 0).astype(np.int32)


def local_dates(t_ns: np.ndarray, timezone: str) -> np.ndarray:
    """Each time's local calendar date in ``timezone``, as days since 1970-01-01."""
    local = pd.to_datetime(t_ns, utc=True).tz_convert(timezone).tz_localize(None)
    return local.to_numpy().astype("datetime64[D]").astype(np.int64)


def hash_note(key: str, buckets: int, h: Hashed) -> str:
    """The import note on a hashed id column: how many distinct ids share a bucket."""
    return (f"ids: {key} ids hashed into {buckets:,} buckets: {h.shared:,} of "
            f"{h.distinct:,} distinct ids ({100 * h.collision_rate:.2f} %) share a bucket with "
            "another id (ids: dense gives each its own row)")


DAY_DATES = "day_dates"  # schema.json generator key: {day: [first, last UTC date]}, buckets


def day_dates(day: np.ndarray, ts: np.ndarray) -> dict[str, list[str]]:
    """Each day's first and last event date (UTC, ISO), for days that are time buckets
    (``day`` non-decreasing, ``ts`` in seconds), so a reader of the dataset can name a
    bucket's dates."""
    present, start = np.unique(day, return_index=True)
    return spans_as_dates(present, np.minimum.reduceat(ts, start), np.maximum.reduceat(ts, start))


def spans_as_dates(days: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> dict[str, list[str]]:
    """``{day: [date of lo, date of hi]}`` (UTC, ISO) from seconds."""
    first, last = (np.asarray(v, dtype="datetime64[s]").astype("datetime64[D]").astype(str)
                   for v in (lo, hi))
    return {str(int(d)): [str(a), str(b)] for d, a, b in zip(days, first, last, strict=True)}
