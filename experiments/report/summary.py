"""Mean ± std over seeds per (lag, variant, domain, task), the orders tables use, the number
formats, and :class:`RunView` (a run directory loaded once)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemkd.experiments.report.family import CSV_COLUMNS, Family, primary_family, shown
from gemkd.experiments.report.intervals import COLUMNS, Intervals, run_intervals
from gemkd.experiments.report.robustness import mark
from gemkd.experiments.report.table_names import (
    ALL,
    CELL_KEYS,
    FIRST_TASK,
    METRICS,
    OPTIONAL_METRICS,
    VARIANTS,
    validate_results,
)
from gemkd.experiments.run_dir import RunDir


def summarize(results: pd.DataFrame, order: Sequence[str] | None = None) -> pd.DataFrame:
    """Mean and std over seeds per (teacher_lag_days, variant, domain, task).

    Parameters
    ----------
    results
        A ``results.csv`` table (validated here).
    order
        The variants' order (a spec's; None: the built-ins' canonical order, others after by
        name).

    Returns
    -------
    pandas.DataFrame
        The four keys, ``n_seeds``, then ``<m>_mean`` and ``<m>_std`` for every metric in
        :data:`METRICS`, ``gap_closed = (ne_baseline - ne) / (ne_baseline - ne_oracle)`` per row
        (NaN where the oracle is unknown). Rows: lag ascending, variants in order, domain ``all``
        first, task ``click`` first.

    Raises
    ------
    ConfigError
        Naming the column and row of a table that breaks the results schema.
    """
    df = validate_results(results, "results")
    df["gap_closed"] = gap_closed(df)
    for col in OPTIONAL_METRICS:
        if col not in df.columns:
            df[col] = np.nan
    vals = df[[*CELL_KEYS, "seed", *METRICS]].copy()
    vals[list(METRICS)] = vals[list(METRICS)].replace([np.inf, -np.inf], np.nan)
    groups = vals.groupby(list(CELL_KEYS), sort=False)
    agg = groups[list(METRICS)].agg(["mean", "std"])
    agg.columns = [f"{m}_{s}" for m, s in agg.columns]
    # efficiency is undefined on a seed where plain KD did not gain: then for the whole cell,
    # rather than a mean over the seeds that happen to be defined
    undefined = vals["efficiency_vs_kd"].isna().groupby([vals[k] for k in CELL_KEYS],
                                                         sort=False).any()
    agg.loc[undefined[undefined].index, ["efficiency_vs_kd_mean", "efficiency_vs_kd_std"]] = \
        np.nan
    n = groups["seed"].nunique().rename("n_seeds")
    out = pd.concat([n, agg], axis=1).reset_index()
    return sort_summary(out, task_order(df), order)


def gap_closed(df: pd.DataFrame) -> pd.Series:
    denom = df["ne_baseline"] - df["ne_oracle"]
    ok = df["ne_oracle"].notna() & (denom.abs() > 1e-12)
    gap = (df["ne_baseline"] - df["ne"]) / denom.where(ok)
    return gap.where(ok)


def variant_order(names: Sequence[str], order: Sequence[str] | None = None) -> list[str]:
    """``names`` in ``order`` (a spec's variants), else the built-ins' canonical order; others
    follow, sorted by name."""
    order = list(order or VARIANTS)
    return sorted(set(names), key=lambda n: (order.index(n), "") if n in order
                  else (len(order), n))


def domain_order(names: Sequence[str]) -> list[str]:
    return sorted(set(names), key=lambda d: (d != ALL, d))


def task_order(df: pd.DataFrame) -> list[str]:
    tasks = list(dict.fromkeys(df["task"]))
    if FIRST_TASK in tasks:
        tasks.remove(FIRST_TASK)
        tasks.insert(0, FIRST_TASK)
    return tasks


def sort_summary(summary: pd.DataFrame, tasks: list[str],
                 order: Sequence[str] | None = None) -> pd.DataFrame:
    v = {name: i for i, name in enumerate(variant_order(summary["variant"], order))}
    d = {name: i for i, name in enumerate(domain_order(summary["domain"]))}
    t = {name: i for i, name in enumerate(tasks)}
    ranks = pd.DataFrame({
        "lag": summary["teacher_lag_days"],
        "d": summary["domain"].map(d),
        "t": summary["task"].map(t),
        "v": summary["variant"].map(v),
    })
    order = ranks.sort_values(["lag", "d", "t", "v"], kind="stable").index
    return summary.loc[order].reset_index(drop=True)


def f4(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    r = round(float(x), 4)
    return f"{0.0 if r == 0 else r:.4f}"


def bound(x: float) -> str:
    """An interval's end at 4 decimals, or with as many more (up to 8) as its sign needs: an end
    of 2e-05 is what makes a verdict "beats KD", one of -2e-05 "not resolved", and both would
    read 0.0000."""
    decimals = 4
    while x != 0 and round(float(x), decimals) == 0 and decimals < 8:
        decimals += 1
    return f4(x) if decimals == 4 else f"{float(x):.{decimals}f}"


def ci(point: float, lo: float, hi: float) -> str:
    """``0.0079 [0.0061, 0.0098]``; the point alone where there is no interval; an end that
    would round to 0.0000 keeps the digits that show its sign (:func:`bound`)."""
    if not math.isfinite(point):
        return "—"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f4(point)
    return f"{f4(point)} [{bound(lo)}, {bound(hi)}]"


def pm(mean: float, std: float) -> str:
    if mean is None or not math.isfinite(mean):
        return "—"
    return f"{f4(mean)} ± {f4(std) if std is not None and math.isfinite(std) else 'n/a'}"


def lag_str(lag: Any) -> str:
    return f"{lag:g}" if isinstance(lag, float) else str(lag)


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """A Markdown table; the first ``left`` columns are labels (left-aligned), numbers right."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def seed_stats(values: pd.Series) -> tuple[float, float]:
    v = values.replace([np.inf, -np.inf], np.nan).dropna()
    if v.empty:
        return math.nan, math.nan
    return float(v.mean()), float(v.std()) if len(v) > 1 else math.nan


class RunView:
    """Everything a report needs, loaded once from a run directory."""

    def __init__(self, run_dir: str | Path | RunDir):
        self.run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
        self.dir = self.run_dir.path
        self.raw = self.run_dir.results()
        self.spec = self.run_dir.spec()
        variants = (self.spec or {}).get("variants")
        self.order = list(variants) if isinstance(variants, dict | list) else None
        self.summary = summarize(self.raw, self.order)
        self.tasks = task_order(self.raw)
        self.lags = sorted(self.raw["teacher_lag_days"].unique().tolist())
        self.lag = self.lags[0]
        self.domains = domain_order(self.raw["domain"])
        self.domain = ALL if ALL in self.domains else self.domains[0]
        self.task = self.tasks[0]
        self.variants = variant_order(self.raw["variant"], self.order)
        name = (self.spec or {}).get("name")
        self.name = str(name) if name else self.dir.resolve().name

    @cached_property
    def intervals(self) -> Intervals:
        """95 % intervals and verdicts (gemkd.experiments.report.intervals), computed on first use:
        a bootstrap when the run has per-user evaluation files, NaN intervals otherwise."""
        iv = run_intervals(self.dir, self.raw, self.spec)
        return replace(iv, table=sort_summary(iv.table, self.tasks, self.order))

    @cached_property
    def family(self) -> Family | None:
        """The primary comparisons, Holm-adjusted (gemkd.experiments.report.family); None
        without intervals. Each comparison carries whether its verdict held in the repeat
        under perturbed numerics (gemkd.experiments.report.robustness), where the run has one."""
        repeat = self.dir / RunDir.PERTURBED
        other = RunView(repeat).family if (repeat / RunDir.RESULTS).is_file() else None
        return mark(primary_family(self.dir, self.intervals, self.spec, self.lags, self.tasks,
                                   self.domains, self.variants), other)

    @cached_property
    def csv_table(self) -> pd.DataFrame:
        """intervals.csv: every interval at 95 %, the verdicts (Holm's for the primary
        comparisons), each verdict's family and the primary ones' adjusted intervals."""
        if self.family is not None:
            out = self.family.with_csv_columns(self.intervals.table)
        else:
            out = self.intervals.table.reindex(columns=[*COLUMNS, *CSV_COLUMNS])
            out[["gain_family", "kd_family"]] = ""
        from gemkd.experiments.report.sensitivity import with_sensitivity  # it reads RunView

        return with_sensitivity(self, out)

    @cached_property
    def sensitivity(self) -> pd.DataFrame:
        """Each row's MDE, variance split and variance components
        (gemkd.experiments.report.sensitivity)."""
        from gemkd.experiments.report.sensitivity import sensitivity_frame

        return sensitivity_frame(self, self.family.size if self.family is not None else 0)

    @cached_property
    def shown_table(self) -> pd.DataFrame:
        """The interval rows as the report shows them: a primary comparison's interval is its
        adjusted one."""
        return shown(self.csv_table)

    @property
    def has_intervals(self) -> bool:
        return self.intervals.resolved

    def interval_rows(self, *, lag: Any = None, domain: str | None = None,
                      task: str | None = None) -> pd.DataFrame:
        """Interval rows (one per variant) of a lag × domain × task slice (default: the main),
        as shown (a primary comparison's interval adjusted)."""
        return self._slice(self.shown_table, lag, domain, task)

    def rows(self, *, lag: Any = None, domain: str | None = None,
             task: str | None = None) -> pd.DataFrame:
        """Summary rows (one per variant) of a lag × domain × task slice (default: the main)."""
        return self._slice(self.summary, lag, domain, task)

    def cell(self, *, lag: Any = None, domain: str | None = None,
             task: str | None = None) -> pd.DataFrame:
        """Per-seed result rows of the same slice."""
        return self._slice(self.raw, lag, domain, task)

    def _slice(self, frame: pd.DataFrame, lag: Any, domain: str | None,
               task: str | None) -> pd.DataFrame:
        keep = ((frame["teacher_lag_days"] == (self.lag if lag is None else lag))
                & (frame["domain"] == (domain or self.domain))
                & (frame["task"] == (task or self.task)))
        return frame[keep]

    @property
    def has_oracle(self) -> bool:
        return bool(self.raw["ne_oracle"].notna().any())

    def reference(self, **where: Any) -> dict[str, tuple[float, float]]:
        """Baseline, teacher, oracle and feature-oracle NE (mean, std over seeds) on this
        evaluation slice, and the teacher's share of the baseline's gap to each oracle."""
        cols = ["ne_baseline", "ne_teacher", "ne_oracle", "ne_feature_oracle"]
        cell = self.cell(**where)
        per_seed = (cell.reindex(columns=["world", "seed", *cols])
                    .groupby(["world", "seed"])[cols].mean())
        out = {c: seed_stats(per_seed[c]) for c in cols}
        gain = per_seed["ne_baseline"] - per_seed["ne_teacher"]
        for name, col in (("teacher_share", "ne_oracle"),
                          ("teacher_share_feature", "ne_feature_oracle")):
            out[name] = seed_stats(gain / (per_seed["ne_baseline"] - per_seed[col]))
        return out
