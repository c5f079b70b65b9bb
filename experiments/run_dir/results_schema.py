"""The facts of ``results.csv`` in one place: the variant names the derived columns are relative
to, its columns in the order the runner writes them, each column's type, and the keys that
identify a row and a summary cell. The runner (:mod:`gemkd.experiments.run.results`) writes by
these and the report (:mod:`gemkd.experiments.report.table_names`) validates by them, so a column
added or renamed on one side cannot silently go missing on the other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import ColumnType

#: The labels-only student every ΔNE is against, and plain KD every efficiency is against.
BASELINE = "baseline"
KD = "kd"
#: The pooled domain group of a student over several domains (its rows' ``domain``); a student
#: of one domain has only that domain's rows, under its own name.
ALL = "all"
WORLD = "world"

#: Every column of ``results.csv`` in the runner's order, with its type. ``teacher_lag_days``
#: is a float column whose values are whole days in practice (read back as int when they are).
COLUMN_TYPES: dict[str, ColumnType] = {
    "variant": "str", "seed": "int", WORLD: "int", "domain": "str", "task": "str",
    "teacher_lag_days": "float", "ne": "float", "auc": "float", "calibration": "float",
    "ne_baseline": "float", "ne_teacher": "float", "ne_source": "float", "ne_oracle": "float",
    "ne_feature_oracle": "float", "delta_ne": "float", "transfer_ratio": "float",
    "efficiency_vs_kd": "float", "train_seconds": "float", "examples_per_second": "float",
    "auc_teacher": "float", "calibration_teacher": "float",
}
RESULT_COLUMNS: list[str] = list(COLUMN_TYPES)
#: Columns a results.csv of an older gemkd may lack: ``world`` (one world, 0), the timings and
#: the source/feature-oracle NE (NaN).
OPTIONAL_COLUMNS: tuple[str, ...] = ("ne_source", "ne_feature_oracle", WORLD, "train_seconds",
                                     "examples_per_second", "auc_teacher",
                                     "calibration_teacher")
REQUIRED_COLUMNS: tuple[str, ...] = tuple(c for c in RESULT_COLUMNS if c not in OPTIONAL_COLUMNS)
#: Required columns parsed as numbers; optional numeric ones are parsed when present.
NUMERIC_COLUMNS: tuple[str, ...] = tuple(c for c in REQUIRED_COLUMNS if COLUMN_TYPES[c] != "str")
OPTIONAL_NUMERIC: tuple[str, ...] = ("ne_source", "ne_feature_oracle", WORLD, "auc_teacher",
                                     "calibration_teacher")
#: Columns no row may leave empty.
NON_EMPTY: tuple[str, ...] = ("variant", "seed", "domain", "task", "teacher_lag_days")
#: One summary cell (a variant's seeds pooled), in the order tables sort by.
CELL_KEYS: tuple[str, ...] = ("teacher_lag_days", "domain", "task", "variant")
#: One row of results.csv: a cell's world and seed.
ROW_KEYS: tuple[str, ...] = (*CELL_KEYS, WORLD, "seed")
#: What a variant's row is matched on with the baseline's and KD's rows of the same evaluation.
MATCH_KEYS: tuple[str, ...] = ("seed", WORLD, "domain", "task", "teacher_lag_days")


def validate_results(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """``frame`` (a results.csv read as is) with its columns typed by :data:`COLUMN_TYPES`;
    any problem is a one-line ConfigError naming ``source``, the column and the row."""
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"{source}: missing column {missing[0]!r}"
            + (f" (and {', '.join(map(repr, missing[1:]))})" if missing[1:] else "")
            + f"; expected columns: {', '.join(REQUIRED_COLUMNS)}"
        )
    if frame.empty:
        raise ConfigError(f"{source}: no rows")
    out = frame.copy()
    for col in NUMERIC_COLUMNS + tuple(c for c in OPTIONAL_NUMERIC if c in out.columns):
        raw = out[col]
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna() & raw.notna()
        if bad.any():
            i = _first(bad)
            raise ConfigError(
                f"{source}: column {col!r} row {i + 1}: expected a number, got {raw.iloc[i]!r}"
            )
        out[col] = num.astype(float)
    for col in NON_EMPTY:
        empty = out[col].isna()
        if empty.any():
            raise ConfigError(f"{source}: column {col!r} row {_first(empty) + 1}: empty value")
    for col in (c for c, t in COLUMN_TYPES.items() if t == "str"):
        out[col] = out[col].astype(str)
    out["seed"] = out["seed"].astype(int)
    out[WORLD] = _worlds(out, source)
    lags = out["teacher_lag_days"]
    if (lags == lags.round()).all():
        out["teacher_lag_days"] = lags.astype(int)
    dup = out.duplicated(subset=list(ROW_KEYS))
    if dup.any():
        r = out[dup].iloc[0]
        raise ConfigError(
            f"{source}: duplicate row for variant={r['variant']} seed={r['seed']} "
            f"domain={r['domain']} task={r['task']} teacher_lag_days={r['teacher_lag_days']} "
            f"world={r[WORLD]}"
        )
    return out


def _first(mask: pd.Series) -> int:
    return int(np.flatnonzero(mask.to_numpy())[0])


def _worlds(frame: pd.DataFrame, source: str) -> pd.Series:
    """The ``world`` column as ints; 0 (one world) where an older results.csv has none."""
    if WORLD not in frame.columns:
        return pd.Series(0, index=frame.index, dtype=int)
    world = frame[WORLD]
    bad = world.isna() | (world != world.round())
    if bad.any():
        i = _first(bad)
        raise ConfigError(f"{source}: column {WORLD!r} row {i + 1}: expected an integer world "
                          f"seed, got {world.iloc[i]!r}")
    return world.astype(int)


def one_domain(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of a student of one domain under that domain's name only: a results.csv written
    before gemkd stopped writing them also holds the same rows as domain ``all`` (the pooled
    group of one domain), which a report would show twice. A student over several domains
    keeps its ``all`` rows."""
    named = set(frame["domain"]) - {ALL}
    if len(named) == 1 and ALL in set(frame["domain"]):
        return frame[frame["domain"] != ALL].reset_index(drop=True)
    return frame
