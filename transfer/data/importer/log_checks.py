"""What an import says about the log as a whole: labels that never hold, duplicated rows, one
user holding most rows, and calendar days too thin to be days.

None of these fails to convert, and each would surface much later (a NaN NE after a teacher's
training, metrics dominated by one id, a spec refused over thousands of gaps): so the import
says them up front. A label that never holds is an error (every mapping that gives one has a
typo in its value or column: a task without a positive can be neither learned nor scored);
the rest are notes, since each can be real (a user who is a shop's own test account, rows
logged twice on purpose, a small site's few events a day).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from gemkd.transfer.data.importer.mapping import Label, Mapping
from gemkd.transfer.data.importer.source import show
from gemkd.transfer.errors import DataError

log = logging.getLogger(__name__)

DOMINANT_SHARE = 0.25    # one user with at least this share of the rows ...
DOMINANT_MIN_ROWS = 1_000  # ... of a log of at least this many rows
THIN_DAY_ROWS = 100      # calendar days whose median holds fewer rows are thin
FEW_ROWS = 5             # the thin-days note counts the days under this many rows
SPEC_DAYS = 14           # the days a default run spec reads (teacher 9, student 3, eval 2)
ONE_EVENT_SHARE = 0.5    # a bucketed log where this share of users has one event is noted
BUCKET_ROWS = 5_000      # suggested buckets hold about this many rows (14 to 60 of them)


def check_labels(m: Mapping, positives: dict[str, int], rows: int, sampled: bool) -> list[str]:
    """A label that holds on no row is an error; one that holds on every row (without
    ``negatives``) a note. ``positives``: each label's rows with value 1."""
    notes = []
    for lab in m.labels:
        n = positives.get(lab.name, 0)
        if n == 0:
            raise DataError(f"{m.path}: key {lab.key!r}: {_rule(lab)} holds on none of the "
                            f"log's {rows:,} rows, so task {lab.name!r} has no positive to "
                            "learn or score (a typo in the value or the column?); fix it or "
                            "leave the label out")
        if n == rows and not sampled:
            notes.append(f"labels: {_rule(lab)} holds on every one of the {rows:,} rows "
                         f"({lab.key}): task {lab.name!r} has no negative, its NE is "
                         "undefined; a log of positives only takes `negatives` in the mapping")
    return notes


def _rule(lab: Label) -> str:
    if lab.op is None:
        return f"column {lab.column!r} = 1"
    return f"column {lab.column!r} {lab.op} {lab.value!r}"


def duplicate_note(duplicates: int, rows: int) -> str | None:
    """The note on rows equal to an earlier row in every column the mapping reads."""
    if not duplicates:
        return None
    return (f"rows: {duplicates:,} of {rows:,} rows ({100 * duplicates / rows:.2f} %) repeat an "
            "earlier row in every column the mapping reads (same time, ids, labels and "
            "features): an export that wrote rows twice? They are kept, each an example and a "
            "history event; drop the copies before import if they are not real repeats")


def duplicates(frame: dict) -> int:
    """Rows equal to an earlier row of ``frame`` (columns of equal length) in every column.

    The numeric columns (the time among them) are hashed first; only rows whose hash repeats
    have their text columns hashed too (hashing text is what costs), so a log without repeats
    pays for a numeric hash."""
    cols = {k: (v.reset_index(drop=True) if isinstance(v, pd.Series) else pd.Series(v))
            for k, v in frame.items()}
    n = len(next(iter(cols.values()))) if cols else 0
    if n < 2:
        return 0
    numeric = {k: v for k, v in cols.items() if pd.api.types.is_numeric_dtype(v)}
    candidates = np.ones(n, dtype=bool)
    if numeric:
        key = pd.util.hash_pandas_object(pd.DataFrame(numeric), index=False)
        candidates = key.duplicated(keep=False).to_numpy()
        if not candidates.any():
            return 0
    rows = pd.DataFrame({k: v[candidates] for k, v in cols.items()}).reset_index(drop=True)
    hashed = pd.util.hash_pandas_object(rows, index=False).to_numpy()
    return int(len(hashed) - len(np.unique(hashed)))


def user_notes(counts: np.ndarray, uniq: pd.Index, rows: int) -> list[str]:
    """The note on one user holding a large share of the rows (``counts``: rows per user id,
    the ids ``uniq``)."""
    if rows < DOMINANT_MIN_ROWS or not len(counts):
        return []
    top = int(np.argmax(counts))
    share = counts[top] / rows
    if share < DOMINANT_SHARE:
        return []
    return [f"users: user {show(uniq[top])} holds {int(counts[top]):,} of the {rows:,} rows "
            f"({100 * share:.1f} %): a bot, a shared or placeholder id (0, -1, 'unknown')? "
            "Their rows dominate the training and every metric; drop or split them before "
            "import if they are not one person"]


def one_event_share(counts: np.ndarray) -> float:
    """The share of users with exactly one row."""
    return float((counts == 1).mean()) if len(counts) else 0.0


def one_event_note(counts: np.ndarray, bucketed: bool) -> str | None:
    """The note on users with a single event, for a log imported in time buckets (a calendar
    import says it in its thin-days note, whose advice is the buckets; ``counts``: rows per
    user): such a user's one row has no history and an id seen once, so the signal a model
    can learn is the items', whatever the method."""
    share = one_event_share(counts)
    if not bucketed or share < ONE_EVENT_SHARE:
        return None
    return (f"users: {100 * share:.0f} % of the {len(counts):,} users have a single event (a "
            f"median of {float(np.median(counts)):g} per user): their rows have no history and "
            "ids seen once, so what any model learns of them comes from the items; a method "
            "built on histories or user embeddings has little to work with on this log")


def suggested_buckets(rows: int) -> int:
    """Buckets of about ``BUCKET_ROWS`` rows each, at least the days a default spec reads."""
    return int(min(60, max(SPEC_DAYS, rows // BUCKET_ROWS)))


def thin_days_note(dates: np.ndarray, counts: np.ndarray, one_event: float | None
                   ) -> str | None:
    """A summary of thin calendar days (the median day under ``THIN_DAY_ROWS`` rows): how
    many, how full, the gaps, the users with one event, and what to use instead (``dates``:
    the local dates present, days since 1970-01-01, ascending; ``counts``: their rows)."""
    if not len(dates):
        return None
    median = float(np.median(counts))
    if median >= THIN_DAY_ROWS:
        return None
    rows = int(counts.sum())
    span = int(dates[-1] - dates[0]) + 1
    gaps = int((np.diff(dates) > 1).sum())
    under = float((counts < FEW_ROWS).mean())
    users = (f"; {100 * one_event:.0f} % of users have a single event" if one_event is not None
             else "")
    first, last = (str(np.datetime64(int(d), "D")) for d in (dates[0], dates[-1]))
    busiest = _busiest(dates, counts, SPEC_DAYS)
    n = suggested_buckets(rows)
    return (f"days: thin calendar days: {rows:,} rows on {len(dates):,} days of {span:,} "
            f"({first} to {last}), a median of {median:g} rows a day ({100 * under:.0f} % of "
            f"days hold under {FEW_ROWS}), {span - len(dates):,} days with none in {gaps:,} "
            f"gaps{users}. "
            f"Daily metrics of a few rows are noise and a spec window over a gap is refused: "
            f"give the mapping `days: {{buckets: {n}}}` ({n} time buckets of ~{rows // n:,} "
            f"rows, no gaps), or keep a dense stretch with `days: {{from: DATE, to: DATE}}` "
            f"(the busiest {SPEC_DAYS} days, {busiest})")


def _busiest(dates: np.ndarray, counts: np.ndarray, width: int) -> str:
    """The ``width`` consecutive calendar days holding the most rows, in words."""
    full = np.zeros(int(dates[-1] - dates[0]) + 1, dtype=np.int64)
    full[dates - dates[0]] = counts
    sums = np.convolve(full, np.ones(min(width, len(full)), dtype=np.int64), mode="valid")
    at = int(np.argmax(sums))
    start = np.datetime64(int(dates[0]) + at, "D")
    end = start + np.timedelta64(min(width, len(full)) - 1, "D")
    return f"{start} to {end}, hold {int(sums[at]):,} rows"


def emit(notes: list[str], new: list[str | None]) -> None:
    """Add the notes that are there, each also logged at INFO (``-v``): the CLI prints every
    note as ``note:``, so a warning would print it twice."""
    for note in new:
        if note:
            notes.append(note)
            log.info("%s", note)


def day_notes(present: np.ndarray, counts: np.ndarray, first: int, one_event: float | None
              ) -> list[str]:
    """The notes on a log's calendar days (``present``: the day numbers with rows, ascending,
    day 0 being the date ``first``; ``counts``: their rows): the thin-days summary where the
    median day is thin (it counts the gaps), else the straggler and gap warnings."""
    from gemkd.transfer.data.importer import day_checks

    thin = thin_days_note(present.astype(np.int64) + first, counts, one_event)
    if thin:
        return [thin]
    return [f"days: {w}" for w in
            day_checks.day_count_warnings(present, counts, np.datetime64(first, "D"))]
