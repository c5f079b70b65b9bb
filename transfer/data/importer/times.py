"""Event times: parsing the mapping's ``time`` column, and refusing implausible ones.

A wrong ``time.unit`` does not fail to parse: epoch seconds read as milliseconds are simply dated
January 1970, and the import would go on to write a one-day dataset that validates. So every
time must lie between 1990-01-01 and now (plus a day); a violation stops the import before
anything is written, naming the file, column, row, value, the declared unit and the unit that
would put the column's median value in that range.
"""

from __future__ import annotations

import time as clock
from pathlib import Path

import numpy as np
import pandas as pd

from gemkd.transfer.data.importer.mapping import TIME_UNITS, Time
from gemkd.transfer.data.importer.source import fail, numbers, place, show
from gemkd.transfer.errors import DataError

EARLIEST_NS = int(pd.Timestamp("1990-01-01").value)
TOLERANCE_NS = 86_400 * 10**9  # clocks of the log's machines may run a little ahead
EPOCH_UNITS = ("s", "ms", "us", "ns")  # coarsest first, each 1000x finer than the one before
DAY_NS = 86_400 * 10**9
_OFFSET = r"(?:[zZ]|[+-]\d\d(?::?\d\d)?)\s*$"  # an ISO datetime that names its UTC offset


def time_ns(s: pd.Series, path: Path, t: Time) -> np.ndarray:
    """Event times as int64 nanoseconds since the epoch (UTC), each between 1990 and now."""
    if pd.api.types.is_datetime64_any_dtype(s):  # a Parquet timestamp: the unit is in the type
        ns = _typed(s, path, t)
    elif t.unit == "iso":
        ns = _iso(s, path, t)
    else:
        return _epoch(s, path, t)
    check_range(ns, s, path, t.column)
    return ns


def _typed(s: pd.Series, path: Path, t: Time) -> np.ndarray:
    s = s if s.dt.tz is not None else s.dt.tz_localize(t.timezone)
    if s.isna().any():
        raise fail(path, t.column, int(np.argmax(s.isna().to_numpy())), "empty value", "time")
    return s.dt.tz_convert(None).dt.as_unit("ns").to_numpy().view(np.int64)


def _epoch(s: pd.Series, path: Path, t: Time) -> np.ndarray:
    """Numbers since the epoch in ``t.unit``, checked before scaling (so nothing overflows)."""
    exact = pd.api.types.is_integer_dtype(s)
    v = s.to_numpy(dtype=np.int64) if exact else numbers(s, path, "time")
    check_unit(v, path, t)
    scale = TIME_UNITS[t.unit]
    return v * scale if exact else np.rint(v * scale).astype(np.int64)


def _iso(s: pd.Series, path: Path, t: Time) -> np.ndarray:
    text = s.astype("string")
    has_offset = text.str.contains(_OFFSET, regex=True).fillna(False).to_numpy(dtype=bool)
    aware = pd.to_datetime(text.where(has_offset), format="ISO8601", utc=True, errors="coerce")
    naive = pd.to_datetime(text.where(~has_offset), format="ISO8601", errors="coerce")
    try:
        naive = naive.dt.tz_localize(t.timezone, ambiguous="NaT", nonexistent="NaT")
    except (TypeError, ValueError):  # an offset the pattern missed: not a plain ISO datetime
        naive = pd.Series(pd.NaT, index=s.index, dtype="datetime64[ns, UTC]")
    both = aware.where(has_offset, naive.dt.tz_convert("UTC")).dt.tz_convert(None)
    bad = both.isna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        what = ("empty value" if pd.isna(s.iloc[i]) else
                f"{show(s.iloc[i])} is not an ISO datetime (or not a valid local time in "
                f"{t.timezone})")
        raise fail(path, t.column, i, what, "time")
    return both.dt.as_unit("ns").to_numpy().view(np.int64)


def latest_ns() -> int:
    """The latest plausible event time: now, plus a day of clock skew."""
    return clock.time_ns() + TOLERANCE_NS


def reading(value: float, unit: str) -> str:
    """What ``value`` means in ``unit`` since 1970-01-01 UTC, in words (any magnitude)."""
    ns = float(value) * TIME_UNITS[unit]
    if abs(ns) < 9.2e18:
        return pd.Timestamp(int(ns)).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"the year {1970 + ns / 1e9 / 31_556_952:,.0f}"


def likely_unit(values: np.ndarray) -> str | None:
    """The unit among s, ms, us, ns that dates the median value between 1990 and now."""
    median, latest = float(np.median(values)), latest_ns()
    return next((u for u in EPOCH_UNITS if EARLIEST_NS <= median * TIME_UNITS[u] <= latest),
                None)


def _advice(values: np.ndarray, declared: str) -> str:
    median = np.median(values)
    unit = likely_unit(values)
    if unit is None:
        return (f"no unit among {', '.join(EPOCH_UNITS)} dates the median value {median:.0f} "
                "between 1990 and now: is this column a time since 1970-01-01 UTC?")
    return (f"the likely unit is {unit!r} (the median value {median:.0f} is "
            f"{reading(median, unit)} in {unit!r}; in the declared {declared!r} it is "
            f"{reading(median, declared)})")


def check_unit(values: np.ndarray, path: Path, t: Time) -> None:
    """Epoch numbers in the declared unit must date between 1990 and now, and must not all
    fall on one day when the unit 1000x coarser would date them plausibly over several."""
    _check_one_day(values, path, t)
    scale = TIME_UNITS[t.unit]
    early, late = values < EARLIEST_NS / scale, values > latest_ns() / scale
    if not (early | late).any():
        return
    i = int(np.argmax(early | late))
    when = "before 1990-01-01" if early[i] else "after now"
    raise DataError(f"{path}: column {t.column!r} {place(path, i)}: {show(values[i])} in "
                    f"unit {t.unit!r} is {reading(values[i], t.unit)}, {when} (mapping key "
                    f"'time.unit'); {_advice(values, t.unit)}")


def _check_one_day(values: np.ndarray, path: Path, t: Time) -> None:
    """The declared unit is probably 1000x too fine: every time falls on one UTC day, while
    read in the next coarser unit they date plausibly and span several days. (A daily file of
    real times in a fine unit is fine: read 1000x coarser it would not be plausible.)"""
    k = EPOCH_UNITS.index(t.unit)
    if k == 0 or likely_unit(values) != EPOCH_UNITS[k - 1]:
        return
    coarser, scale = EPOCH_UNITS[k - 1], TIME_UNITS[t.unit]
    lo, hi = float(values.min()) * scale, float(values.max()) * scale
    if lo // DAY_NS != hi // DAY_NS or (hi - lo) * 1000 <= DAY_NS:
        return
    i = int(np.argmin(values))
    raise DataError(f"{path}: column {t.column!r}: every time in unit {t.unit!r} falls on "
                    f"one UTC day ({place(path, i)}: {show(values[i])} is "
                    f"{reading(values[i], t.unit)}), while in unit {coarser!r} they span "
                    f"{(hi - lo) * 1000 / DAY_NS:,.1f} days (mapping key 'time.unit'); "
                    f"{_advice(values, t.unit)}")


def check_range(ns: np.ndarray, s: pd.Series, path: Path, column: str) -> None:
    """Parsed times (ISO text, Parquet timestamps) must lie between 1990 and now."""
    early, late = ns < EARLIEST_NS, ns > latest_ns()
    if not (early | late).any():
        return
    i = int(np.argmax(early | late))
    when = "before 1990-01-01" if early[i] else "after now"
    raise fail(path, column, i, f"{show(s.iloc[i])} is {reading(ns[i], 'ns')}, {when} "
                                "(every time must lie between 1990 and now)", "time.column")
