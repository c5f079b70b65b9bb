"""The report's primary family (DESIGN §6): which comparisons a run's verdicts rest on, adjusted
together by Holm's step-down (:func:`gemkd.transfer.metrics.holm.holm`) at the report's level.

A benchmark report tests ~30 comparisons against KD and ~36 gains; at 5 % each, one or two
"wins" come from noise alone, and a headline that picks the best variant and then tests it is
the worst of them. So the spec names its primary comparisons (``primary:``, default: every
variant against plain KD and KD against the baseline, at the first lag, on the student's first
task and its domain, the twins left out), the report adjusts that family, shows each one's
adjusted interval — at the level of the Holm step that decided it, so the interval excludes 0
exactly when Holm rejects (:mod:`gemkd.transfer.metrics.holm`) — and labels every other
resolved comparison exploratory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemkd.experiments.report.cluster_files import load_eval_sets
from gemkd.experiments.report.intervals import (
    BEATS,
    BELOW,
    GAIN,
    LOSS,
    UNRESOLVED,
    Intervals,
    labels,
    lag_tables,
)
from gemkd.experiments.run_dir.results_schema import ALL, BASELINE, KD
from gemkd.experiments.spec.primary import PrimarySpec
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.holm import holm

PRIMARY, EXPLORATORY = "primary", "exploratory"
#: One row per primary comparison "a vs b": the difference ΔNE(a) − ΔNE(b) with its 95 %
#: interval and p-value, Holm's adjusted p, rank and decision, the adjusted interval (its
#: level ``1 − alpha``) and, against KD, the efficiency's interval at that level.
COLUMNS = ["a", "b", "diff", "lo", "hi", "p", "holm_p", "rank", "alpha", "adj_lo", "adj_hi",
           "eff_lo", "eff_hi", "verdict", "n_worlds", "worlds_agree"]
#: Columns the family adds to intervals.csv: which family each verdict is in, and the primary
#: comparisons' Holm-adjusted p-values and intervals (empty elsewhere).
CSV_COLUMNS = ["gain_family", "kd_family", "delta_ne_holm_p", "delta_ne_adj_level",
               "delta_ne_adj_lo", "delta_ne_adj_hi", "vs_kd_holm_p", "vs_kd_adj_level",
               "vs_kd_adj_lo", "vs_kd_adj_hi", "efficiency_adj_lo", "efficiency_adj_hi",
               "gain_robustness", "kd_robustness"]


@dataclass(frozen=True)
class Family:
    """The primary comparisons of a run (``table``: :data:`COLUMNS`, in the family's order) on
    one slice, adjusted at family-wise ``alpha``; ``named``: the spec named them (else the
    default family)."""

    table: pd.DataFrame
    lag: Any
    task: str
    domain: str
    alpha: float
    named: bool

    @property
    def size(self) -> int:
        return len(self.table)

    def resolved(self) -> pd.DataFrame:
        return self.table[self.table["verdict"] != UNRESOLVED]

    def describe(self) -> str:
        """What the family is, in words: the default's rule, or the named comparisons."""
        if self.named:
            return ", ".join(f"{r.a} vs {r.b}" for r in self.table.itertuples())
        refs = set(self.table["b"])
        if KD in refs:
            return "each variant against plain KD" + (
                " and plain KD against the labels-only baseline" if BASELINE in refs else "")
        return "each variant against the labels-only baseline"

    def with_csv_columns(self, table: pd.DataFrame) -> pd.DataFrame:
        """``table`` (the run's intervals) with :data:`CSV_COLUMNS`: primary verdicts replaced
        by Holm's, every other non-empty verdict's family exploratory. KD against the baseline
        is one comparison in two rows (KD's ΔNE, the baseline's difference to KD): both are
        primary when it is."""
        out = table.copy()
        out["gain_family"] = np.where(out["gain_verdict"].fillna("") != "", EXPLORATORY, "")
        out["kd_family"] = np.where(out["kd_verdict"].fillna("") != "", EXPLORATORY, "")
        for col in CSV_COLUMNS[2:-2]:
            out[col] = np.nan
        out[CSV_COLUMNS[-2:]] = ""  # fragile or holds: a primary verdict in the repeat
        for c in self.table.itertuples():
            rejected = c.verdict != UNRESOLVED
            if c.b in (BASELINE, KD):
                self._set(out, c.a, c.b, c.verdict, c, 1.0)
            if {c.a, c.b} == {KD, BASELINE}:  # the mirror row of the same comparison
                sign = -1.0
                words = _words(c.a)
                mirror = (words[0] if -c.diff > 0 else words[1]) if rejected else UNRESOLVED
                self._set(out, c.b, c.a, mirror, c, sign)
        return out

    def _set(self, out: pd.DataFrame, a: str, b: str, verdict: str, c: Any,
             sign: float) -> None:
        """Write comparison ``c`` (``sign`` −1: read from the other side) into row ``a``'s
        columns against ``b`` (the baseline: its ΔNE; KD: its difference to KD)."""
        at = ((out["teacher_lag_days"] == self.lag) & (out["domain"] == self.domain)
              & (out["task"] == self.task) & (out["variant"] == a))
        stat, kind = ("delta_ne", "gain") if b == BASELINE else ("vs_kd", "kd")
        lo, hi = (c.adj_lo, c.adj_hi) if sign > 0 else (-c.adj_hi, -c.adj_lo)
        out.loc[at, [f"{kind}_family", f"{kind}_verdict"]] = [PRIMARY, verdict]
        out.loc[at, f"{kind}_robustness"] = getattr(c, "robustness", "")
        out.loc[at, [f"{stat}_holm_p", f"{stat}_adj_level", f"{stat}_adj_lo",
                     f"{stat}_adj_hi"]] = [c.holm_p, 1 - c.alpha, lo, hi]
        if b == KD and sign > 0:
            out.loc[at, ["efficiency_adj_lo", "efficiency_adj_hi"]] = [c.eff_lo, c.eff_hi]


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """A table with :data:`CSV_COLUMNS` as the report shows it: a primary comparison's
    interval (and half-width, and efficiency against KD) is its adjusted one."""
    out = table.copy()
    for stat, kind in (("delta_ne", "gain"), ("vs_kd", "kd")):
        at = out[f"{kind}_family"] == PRIMARY
        out.loc[at, f"{stat}_lo"] = out.loc[at, f"{stat}_adj_lo"]
        out.loc[at, f"{stat}_hi"] = out.loc[at, f"{stat}_adj_hi"]
        out.loc[at, f"{stat}_half_width"] = (out.loc[at, f"{stat}_hi"]
                                             - out.loc[at, f"{stat}_lo"]) / 2
    at = out["kd_family"] == PRIMARY
    out.loc[at, "efficiency_lo"] = out.loc[at, "efficiency_adj_lo"]
    out.loc[at, "efficiency_hi"] = out.loc[at, "efficiency_adj_hi"]
    return out


def twins_of(spec: dict[str, Any] | None) -> dict[str, str]:
    """A/A twin → its original, from spec.yaml's variants (``twin_of``)."""
    variants = (spec or {}).get("variants")
    if not isinstance(variants, dict):
        return {}
    return {str(k): str(v["twin_of"]) for k, v in variants.items()
            if isinstance(v, dict) and v.get("twin_of")}


def default_pairs(variants: list[str], twins: dict[str, str]) -> list[tuple[str, str]]:
    """Each variant against plain KD and KD against the baseline (twins left out); without KD,
    each variant against the baseline."""
    arms = [v for v in variants if v not in twins]
    if KD in arms:
        return [(v, KD) for v in arms if v not in (BASELINE, KD)] + \
            ([(KD, BASELINE)] if BASELINE in arms else [])
    return [(v, BASELINE) for v in arms if v != BASELINE] if BASELINE in arms else []


def primary_family(run_dir: str | Path, intervals: Intervals, spec: dict[str, Any] | None,
                   lags: list, tasks: list[str], domains: list[str],
                   variants: list[str]) -> Family | None:
    """The run's primary family, adjusted; None for a run without intervals."""
    if not intervals.resolved:
        return None
    where = "spec.yaml: key 'primary'"
    primary = PrimarySpec.from_mapping((spec or {}).get("primary") or {}, where)
    twins = twins_of(spec)
    lag = lags[0] if primary.lag is None else primary.lag
    task = tasks[0] if primary.task is None else primary.task
    domain = _domain(primary.domain, domains, where)
    if lag not in lags or task not in tasks:
        raise ConfigError(f"{where}: lag {lag} and task {task!r}: the run has lags {lags} and "
                          f"tasks {tasks}")
    pairs = primary.pairs() or default_pairs(variants, twins)
    for a, b in pairs:
        for name in (a, b):
            if name not in variants:
                raise ConfigError(f"{where}: comparison '{a} vs {b}': the run has no variant "
                                  f"{name!r} ({', '.join(variants)})")
            if name in twins:
                raise ConfigError(f"{where}: comparison '{a} vs {b}' names the A/A twin "
                                  f"{name!r}; twins are never in the primary family")
    sets = [s for s in load_eval_sets(run_dir) if s.lag == lag]
    alpha = 1 - intervals.level
    rows: list[dict[str, Any]] = [dict(a=a, b=b) for a, b in pairs]
    refs = list(dict.fromkeys(_ref(b) for _, b in pairs))
    base = dict(zip(refs, lag_tables(sets, intervals.samples, intervals.seed,
                                     [(intervals.level, r) for r in refs]), strict=True))
    for row in rows:
        r = _pick(base[_ref(row["b"])][0], lag, domain, task, row["a"])
        row.update(_stat(r, row["b"]))
    if not rows:
        return Family(pd.DataFrame(columns=COLUMNS), lag, task, domain, alpha,
                      bool(primary.comparisons))
    h = holm(np.array([r["p"] for r in rows], dtype=float), alpha)
    wanted = list(dict.fromkeys((1 - float(a), _ref(r["b"])) for a, r in zip(h.alpha, rows,
                                                                             strict=True)))
    adjusted = dict(zip(wanted, lag_tables(sets, intervals.samples, intervals.seed, wanted),
                        strict=True))
    for i, row in enumerate(rows):
        key = (1 - float(h.alpha[i]), _ref(row["b"]))
        adj = _stat(_pick(adjusted[key][0], lag, domain, task, row["a"]), row["b"])
        above, under = _words(row["b"])
        verdict = (above if row["diff"] > 0 else under) if h.reject[i] else UNRESOLVED
        row.update(holm_p=h.adjusted[i], rank=int(h.rank[i]), alpha=float(h.alpha[i]),
                   adj_lo=adj["lo"], adj_hi=adj["hi"], eff_lo=adj["eff_lo"],
                   eff_hi=adj["eff_hi"], verdict=verdict)
    return Family(pd.DataFrame(rows, columns=COLUMNS), lag, task, domain, alpha,
                  bool(primary.comparisons))


def _domain(named: str | None, domains: list[str], where: str) -> str:
    """The family's domain: the named one (``all`` of a one-domain student is that domain: the
    same rows, counted once), else ``all`` when the run has it, else its one domain."""
    own = [d for d in domains if d != ALL]
    if named is None:
        return ALL if ALL in domains else domains[0]
    if named == ALL and ALL not in domains and len(own) == 1:
        return own[0]
    if named not in domains:
        raise ConfigError(f"{where}: domain {named!r}: the run has {', '.join(domains)}")
    return named


def _ref(b: str) -> str:
    """The reference arm a table against ``b`` is computed with (any for the baseline's ΔNE)."""
    return KD if b == BASELINE else b


def _pick(table: pd.DataFrame, lag: Any, domain: str, task: str,
          variant: str) -> pd.Series | None:
    """Variant's row of the slice; None when clusters/ has no evaluation of it there."""
    r = table[(table["teacher_lag_days"] == lag) & (table["domain"] == domain)
              & (table["task"] == task) & (table["variant"] == variant)]
    return None if r.empty else r.iloc[0]


def _stat(r: pd.Series | None, b: str) -> dict[str, float]:
    """The comparison's difference, interval and p-value from a table row of variant a (all
    nan without one: a member of the family that cannot be resolved)."""
    if r is None:
        return dict(diff=math.nan, lo=math.nan, hi=math.nan, p=math.nan, eff_lo=math.nan,
                    eff_hi=math.nan, n_worlds=0, worlds_agree=0)
    if b == BASELINE:
        return dict(diff=r["delta_ne"], lo=r["delta_ne_lo"], hi=r["delta_ne_hi"],
                    p=r["delta_ne_p"], eff_lo=math.nan, eff_hi=math.nan,
                    n_worlds=int(r["n_worlds"]), worlds_agree=int(r["worlds_agree_delta_ne"]))
    return dict(diff=r["vs_kd"], lo=r["vs_kd_lo"], hi=r["vs_kd_hi"], p=r["vs_kd_p"],
                eff_lo=r["efficiency_lo"], eff_hi=r["efficiency_hi"],
                n_worlds=int(r["n_worlds"]), worlds_agree=int(r["worlds_agree_vs_kd"]))


def _words(b: str) -> tuple[str, str]:
    if b == BASELINE:
        return GAIN, LOSS
    return (BEATS, BELOW) if b == KD else labels(b)
