"""The transfer-scaling study's points read back from their finished run directories: each
point's teacher and student rows per world, the report's intervals (``intervals.csv``, written
by ``gemkd report``), the per-world and per-seed ΔNE behind them, and the teacher's share of the
labels-only student's gap to the oracle (``results.csv``'s columns, as the report computes gap
closed). Nothing here makes an interval: every one is the report's."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemkd.experiments.run_dir import RunDir, read_csv
from gemkd.experiments.run_dir.results_schema import BASELINE, KD
from gemkd.transfer.errors import ConfigError

#: intervals.csv columns a point keeps: (point, lower, upper) per statistic
STATS = {"delta_ne": ("delta_ne", "delta_ne_lo", "delta_ne_hi"),
         "vs_kd": ("vs_kd", "vs_kd_lo", "vs_kd_hi"),
         "tr": ("transfer_ratio", "tr_lo", "tr_hi")}


@dataclasses.dataclass
class Point:
    """One point of the study: the teacher's ``days``, its run directory and what was read."""

    days: int
    run: Path
    data: pd.DataFrame  # one row per world: teacher_days, teacher_rows, student_rows, ratio
    intervals: pd.DataFrame  # the cell's intervals.csv rows, one per variant
    results: pd.DataFrame  # the cell's results.csv rows (every world, seed and variant)
    phases: dict[str, float] | None
    data_steps: tuple[str, ...] = ()  # the cached data steps (cache/data-<hash>): the worlds

    @property
    def multiple(self) -> float:
        """The teacher's rows over the student's, mean over worlds."""
        return float(self.data["ratio"].mean())


def read_point(days: int, run: Path, domain: str, task: str) -> Point:
    """Read one finished point (lag 0 of ``domain`` and ``task``); a missing file or cell is a
    ConfigError naming the run directory and what is missing."""
    rd = RunDir(run)
    for name in (RunDir.RESULTS, RunDir.INTERVALS, RunDir.TEACHER_DATA):
        if not (rd / name).is_file():
            hint = " (run `gemkd report` on it)" if name == RunDir.INTERVALS else \
                " (the point has not finished: rerun the study without --report-only)"
            raise ConfigError(f"{run}: no {name}{hint}")
    rows = [{"world": int(w), **{k: by_lag["0"][k] for k in
                                 ("teacher_days", "teacher_rows", "student_rows", "ratio")}}
            for w, by_lag in rd.teacher_data().items() if "0" in by_lag]
    data = pd.DataFrame(rows).sort_values("world").reset_index(drop=True)
    iv = read_csv(rd / RunDir.INTERVALS)
    iv = iv[(iv.teacher_lag_days == 0) & (iv.domain == domain) & (iv.task == task)]
    res = rd.results()
    res = res[(res.teacher_lag_days == 0) & (res.domain == domain) & (res.task == task)]
    if iv.empty or res.empty:
        raise ConfigError(f"{run}: no lag-0 rows of domain {domain!r}, task {task!r}")
    steps = tuple(sorted(p.name for p in rd.steps("data")))
    return Point(days, Path(run), data, iv.set_index("variant"), res.reset_index(drop=True),
                 rd.phases(), steps)


def check_student_rows(points: list[Point]) -> pd.DataFrame:
    """The student's training rows per world (rows) at every point (columns): the study's
    premise is that they are the same, from the same worlds (the same cached data steps, whose
    names hash the data's config and code); a point where either differs is a ConfigError."""
    steps = {p.data_steps for p in points}
    if len(steps) > 1:
        raise ConfigError("the points' worlds are different data steps ("
                          + "; ".join(f"D = {p.days}: {', '.join(p.data_steps)}" for p in points)
                          + "): the points are not the same worlds")
    table = pd.DataFrame({p.days: p.data.set_index("world")["student_rows"] for p in points})
    differ = table[table.nunique(axis=1) > 1]
    if len(differ):
        w = differ.index[0]
        raise ConfigError(f"world {w}: the student's rows differ between points "
                          f"({dict(differ.loc[w])}): the points are not the same student data")
    return table


def summary(points: list[Point], variants: list[str]) -> pd.DataFrame:
    """One row per point and variant: the report's ΔNE, ΔNE − ΔNE(KD) and transfer ratio with
    their intervals and verdicts, with the point's days and teacher multiple."""
    rows = []
    for p in points:
        for v in variants:
            if v not in p.intervals.index:
                continue
            r = p.intervals.loc[v]
            row: dict[str, Any] = {"days": p.days, "multiple": p.multiple, "variant": v,
                                   "n_worlds": r.get("n_worlds", np.nan),
                                   "gain_verdict": r.get("gain_verdict", ""),
                                   "kd_verdict": r.get("kd_verdict", "")}
            for stat, cols in STATS.items():
                for suffix, col in zip(("", "_lo", "_hi"), cols, strict=True):
                    row[stat + suffix] = float(r[col]) if col in r and pd.notna(r[col]) \
                        else np.nan
            rows.append(row)
    return pd.DataFrame(rows)


def teacher_share(point: Point) -> pd.DataFrame:
    """Per world: the teacher's NE, the labels-only student's and the oracle's (seed means), and
    the teacher's share of the student's gap to the oracle, (NE(baseline) − NE(teacher)) /
    (NE(baseline) − NE(oracle)) — the report's gap closed with the teacher in the variant's
    place."""
    base = point.results[point.results.variant == BASELINE]
    g = base.groupby("world")[["ne", "ne_teacher", "ne_oracle"]].mean()
    g["share"] = (g["ne"] - g["ne_teacher"]) / (g["ne"] - g["ne_oracle"])
    return g.rename(columns={"ne": "ne_baseline"})


def seed_deltas(point: Point, variants: list[str]) -> pd.DataFrame:
    """ΔNE per (world, seed) (rows) and variant (columns; the baseline's is 0)."""
    r = point.results[point.results.variant.isin(variants)]
    table = r.pivot_table(index=["world", "seed"], columns="variant", values="delta_ne",
                          aggfunc="mean")
    if BASELINE in variants:
        table[BASELINE] = 0.0
    return table[[v for v in variants if v in table.columns]]


def vs_kd_order(variants: list[str]) -> list[str]:
    """The variants compared with plain KD (every one but the baseline and KD)."""
    return [v for v in variants if v not in (BASELINE, KD)]


def phase_table(points: list[Point]) -> pd.DataFrame:
    """Wall minutes per phase (columns) of each point's run (rows by days)."""
    return pd.DataFrame({p.days: {k: v / 60 for k, v in (p.phases or {}).items()}
                         for p in points}).T.fillna(0.0)
