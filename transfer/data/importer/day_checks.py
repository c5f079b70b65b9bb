"""Warnings about a log's calendar days: straggler days and gaps.

A real export often ends in a few rows dated a day past its cut (a clock's stragglers, the edge
of a query window), and a log can miss days altogether (a pipeline outage). Neither stops an
import, but a straggler day as an evaluation day gives metrics of a handful of rows, and a gap
leaves day numbers with no data that a spec window cannot span: so both are said (notes and
warnings).
"""

from __future__ import annotations

import numpy as np

STRAGGLER_SHARE = 0.05  # a day with under 5 % of the median day's rows
MAX_LISTED = 5          # gaps named one by one, then a count


def day_warnings(day: np.ndarray, day0: np.datetime64) -> list[str]:
    """Sentences about straggler days and runs of missing days among ``day`` (the calendar day
    of every logged row, 0 = the date ``day0``)."""
    present, counts = np.unique(day, return_counts=True)
    return day_count_warnings(present, counts, day0)


def day_count_warnings(present: np.ndarray, counts: np.ndarray, day0: np.datetime64
                       ) -> list[str]:
    """:func:`day_warnings` from the days present (ascending) and their row counts."""
    out = []
    median = float(np.median(counts))
    few = counts < STRAGGLER_SHARE * median
    if few.any() and len(present) > 1:
        names = [_day(d, day0) for d in present[few]]
        verb = "has" if len(names) == 1 else "have"
        out.append(f"{'day' if len(names) == 1 else 'days'} {_and(names)} {verb} "
                   f"{_and([f'{c:,}' for c in counts[few]])} rows, under "
                   f"{100 * STRAGGLER_SHARE:g} % of the median day's {median:,.0f}: partial "
                   "days (the edge of an export, a clock's stragglers?); leave them out, where "
                   "metrics would rest on a handful of rows: the mapping's `days: {from: DATE, "
                   "to: DATE}` drops them at import (the days are then renumbered from `from`), "
                   "or a spec's `teacher_window_days` can start after a first one")
    gaps = [(int(a) + 1, int(b) - 1) for a, b in zip(present[:-1], present[1:], strict=True)
            if b - a > 1]
    for lo, hi in gaps[:MAX_LISTED]:
        if lo == hi:
            where = f"day {_day(lo, day0)}"
        else:
            where = (f"days {lo}-{hi} ({_date(lo, day0)} to {_date(hi, day0)}, "
                     f"{hi - lo + 1} days)")
        out.append(f"no rows on {where}: the log has a gap; the dataset's days skip it, and a "
                   "spec window (teacher_days, student_days, eval_days) over it is refused")
    if len(gaps) > MAX_LISTED:
        out.append(f"no rows on {len(gaps) - MAX_LISTED} more stretches of days")
    return out


def _date(d: int, day0: np.datetime64) -> str:
    return str(day0 + np.timedelta64(int(d), "D"))


def _day(d: int, day0: np.datetime64) -> str:
    return f"{int(d)} ({_date(d, day0)})"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
