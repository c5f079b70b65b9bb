"""What a run could detect (DESIGN §6): each row's minimum detectable effect (MDE) at 80 %
power and its variance split into evaluation users, training seeds and worlds, from the same
variance components the intervals use (:mod:`gemkd.transfer.metrics.power`).

The MDE of a row is ``δ* · SE``: SE the interval's own (the worlds' t, the fixed-effect floor
where it is the wider, or one world's pivot) and δ* the effect, in standard errors, that the
interval's reference distribution resolves with probability 0.8 at two-sided 5 % (the noncentral
t with the interval's df, the pivot at its users' share and S − 1 df, the normal for one seed).
A primary comparison must also pass Holm: its ``*_mde_holm`` is at α/m, Holm's strictest step
(what it needs when no other comparison is resolved before it), m the family's size.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from gemkd.experiments.report.cluster_files import load_eval_sets, unique_groups
from gemkd.experiments.report.family import PRIMARY
from gemkd.experiments.report.world_arrays import per_seed, world_arrays
from gemkd.experiments.run_dir.results_schema import BASELINE, CELL_KEYS
from gemkd.transfer.metrics.contrasts import Units, covariance, difference
from gemkd.transfer.metrics.power import POWER, Components, detectable, run_components

#: A :class:`~gemkd.experiments.report.summary.RunView`, duck-typed: ``RunView.sensitivity``
#: and ``csv_table`` call this module, so it cannot import the class back.
RunView = Any

#: The two contrasts a verdict reads: ΔNE (against the baseline) and ΔNE − ΔNE(reference).
STATS = {"delta_ne": "delta", "vs_kd": "vs_kd"}
SOURCES = ("users", "seeds", "worlds")
#: Columns this module adds to intervals.csv: per contrast the MDE at the report's level and
#: 80 % power, at Holm's strictest level (primary comparisons only), and the variance of the
#: estimate (NE²) by source; then that power and Holm's level.
CSV_COLUMNS = [f"{s}_{c}" for s in STATS for c in
               ("mde", "mde_holm", *(f"var_{src}" for src in SOURCES))] + \
    ["mde_power", "holm_level"]
#: The components the planner reads (per contrast), and the size they were measured at.
COMPONENTS = ("users_shared", "users_seed", "seeds", "worlds")
SIZE = ["n_worlds", "n_seeds", "n_users", "eval_rows"]


def sensitivity_frame(run: RunView, family_size: int = 0) -> pd.DataFrame:
    """One row per (lag, domain, task, variant) of a run with per-user files: :data:`CSV_COLUMNS`
    (``mde_holm`` for every row at α/``family_size``; the caller keeps it for the primary ones)
    and the components the planner reads (``<stat>_<component>``, :data:`SIZE`). Empty without
    per-user files."""
    iv = run.intervals
    if not iv.resolved:
        return pd.DataFrame(columns=[*CELL_KEYS, *CSV_COLUMNS])
    alpha = 1 - iv.level
    holm = alpha / family_size if family_size else math.nan
    sets = load_eval_sets(run.run_dir)
    rows = []
    for lag in sorted({s.lag for s in sets}):
        at = [s for s in sets if s.lag == lag]
        variants = list(dict.fromkeys(v for es in at for v, _ in es.students))
        ib = variants.index(BASELINE) if BASELINE in variants else None
        ir = variants.index(iv.reference) if iv.reference in variants else None
        per = [world_arrays(es, variants, iv.samples, iv.seed) for es in at]
        stats = {}
        for stat, ref in (("delta_ne", ib), ("vs_kd", ir)):
            if ref is not None:
                stats[stat] = _stat(per, ref, alpha, holm)
        for g, domain in unique_groups(at[0].groups):
            size = _size(at, g)
            for t, task in enumerate(at[0].tasks):
                for v, variant in enumerate(variants):
                    row: dict = {"teacher_lag_days": lag, "domain": domain, "task": task,
                                 "variant": variant, "mde_power": POWER, "holm_level": holm,
                                 "n_worlds": len(at), "n_users": size[0],
                                 "eval_rows": size[1][t]}
                    for stat, cols in stats.items():
                        for name, arr in cols.items():
                            row[f"{stat}_{name}"] = arr[v, g, t]
                    rows.append(row)
    out = pd.DataFrame(rows)
    return out.reindex(columns=[*CELL_KEYS, *CSV_COLUMNS, *_component_columns(), *SIZE])


def _component_columns() -> list[str]:
    return [f"{s}_{c}" for s in STATS for c in (*COMPONENTS, "n_seeds")]


def _size(sets: list, g: int) -> tuple[float, np.ndarray]:
    """Mean over worlds of the domain group's evaluation users and of its rows per task."""
    users, rows = [], []
    for es in sets:
        d = es.sums.domain
        keep = np.ones(d.shape, bool) if g >= len(es.domains) else d == g
        users.append(np.unique(es.sums.user[keep]).size)
        rows.append(es.sums.n[keep].sum(axis=0))
    return float(np.mean(users)), np.mean(rows, axis=0)


def _stat(per: list, ref: int, alpha: float, holm: float) -> dict[str, np.ndarray]:
    """A contrast's MDEs, variance split and components ``[V, G, T]`` (row ``ref`` is its own
    reference: nan)."""
    worlds = []
    for p in per:
        arms = Units(p.seed_ne, p.reps, p.n_users)
        worlds.append(arms.take(ref).expand() - arms)
    comp = run_components(worlds)
    if len(per) >= 2:
        arms = Units(np.stack([p.ne for p in per]), seeds=per_seed(per))
        units = arms.take(ref).expand() - arms
        share = np.zeros(units.values.shape[1:])
    else:
        units = worlds[0]
        parts = np.maximum(covariance(units, units).comps, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(parts.sum(axis=0) > 0, parts[0] / parts.sum(axis=0), 1.0)
        if per[0].seed_ne.shape[0] < 2:
            share = np.ones(share.shape)
    point = np.zeros(units.values.shape[1:])
    est = difference(point, units, 1 - alpha)
    df = np.where(share >= 1, math.inf, est.df)
    out: dict[str, np.ndarray] = {
        "mde": _mde(est.se, share, df, alpha), "mde_holm": _mde(est.se, share, df, holm)}
    w, s = comp["n_worlds"], comp["n_seeds"]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["var_users"] = (comp["users_shared"] + comp["users_seed"] / s) / w
        out["var_seeds"] = comp["seeds"] / s / w
        out["var_worlds"] = comp["worlds"] / w
    for name in (*COMPONENTS, "n_seeds"):
        out[name] = comp[name]
    for arr in out.values():
        arr[ref] = np.nan
    return out


def _mde(se: np.ndarray, share: np.ndarray, df: np.ndarray, alpha: float) -> np.ndarray:
    out = np.full(se.shape, np.nan)
    if not 0 < alpha < 1:
        return out
    for i in np.ndindex(se.shape):
        if math.isfinite(se[i]) and math.isfinite(share[i]) and se[i] > 0:
            out[i] = detectable(float(share[i]), float(df[i]), alpha, POWER) * se[i]
    return out


def with_sensitivity(run: RunView, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (intervals.csv's rows) with :data:`CSV_COLUMNS`; the Holm MDE kept for the
    primary comparisons only."""
    family = run.family
    frame = run.sensitivity
    out = table.merge(frame[[*CELL_KEYS, *CSV_COLUMNS]], on=list(CELL_KEYS), how="left")
    for stat, kind in (("delta_ne", "gain"), ("vs_kd", "kd")):
        primary = out.get(f"{kind}_family", pd.Series("", index=out.index)) == PRIMARY
        out.loc[~primary, f"{stat}_mde_holm"] = np.nan
    if family is None or not family.size:
        out["holm_level"] = np.nan
    return out


def components_of(frame: pd.DataFrame, stat: str) -> Components:
    """One row's (or the median over rows') components of ``stat`` for the planner."""
    def med(col: str) -> float:
        x = frame[col].astype(float).dropna()
        return float(np.median(x)) if len(x) else math.nan

    return Components(med(f"{stat}_users_shared"), med(f"{stat}_users_seed"),
                      med(f"{stat}_seeds"), med(f"{stat}_worlds"), int(med("n_worlds")),
                      med(f"{stat}_n_seeds"), med("n_users"))
