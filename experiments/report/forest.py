"""Forest plots (DESIGN §6.1): per task and teacher lag, each variant's ΔNE − ΔNE(KD) with the
interval its verdict reads — Holm's adjusted one for a primary comparison (marked), 95 %
otherwise — a zero line, and each world's own point when there are several worlds.

Why not bars of mean ± std over seeds: that spread holds neither the evaluation users' noise
nor the world's, so a bar chart invites verdicts no interval backs; here what is drawn is what
the report decides on. matplotlib's ``Figure`` directly (no pyplot: no global backend)."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemkd.experiments.report.day_unit import in_units, report_unit
from gemkd.experiments.report.family import PRIMARY
from gemkd.experiments.report.summary import RunView, lag_str
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.run_dir.results_schema import BASELINE, KD
from gemkd.transfer.io.atomic import atomic_write_bytes

PREFIX = "forest_"


def forest_name(task: str, lag: Any) -> str:
    return f"{PREFIX}{task}_lag{lag_str(lag)}.png"


def write_forest_plots(run: RunView) -> list[Path]:
    """``plots/forest_<task>_lag<L>.png`` for every task and lag of a run with intervals;
    forest plots of an earlier report that this one does not make are removed."""
    pdir = run.dir / RunDir.PLOTS
    pdir.mkdir(parents=True, exist_ok=True)
    written = []
    if run.has_intervals and KD in run.variants:
        for lag in run.lags:
            for task in run.tasks:
                path = pdir / forest_name(task, lag)
                if _plot(run, lag, task, path):
                    written.append(path)
    for stale in set(pdir.glob(f"{PREFIX}*.png")) - set(written):
        stale.unlink(missing_ok=True)
    return written


def _points(run: RunView, lag: Any, task: str) -> pd.DataFrame:
    """One row per variant but KD: the difference to KD, the interval shown and whether it is
    a primary comparison (the baseline's row is −ΔNE(KD), primary when KD vs baseline is:
    :meth:`Family.with_csv_columns` marks both rows)."""
    rows = run.interval_rows(lag=lag, task=task).set_index("variant")
    out = []
    for v in run.variants:
        if v == KD or v not in rows.index or not math.isfinite(rows.at[v, "vs_kd"]):
            continue
        r = rows.loc[v]
        out.append(dict(variant=v, point=r["vs_kd"], lo=r["vs_kd_lo"], hi=r["vs_kd_hi"],
                        primary=r.get("kd_family") == PRIMARY))
    return pd.DataFrame(out, columns=["variant", "point", "lo", "hi", "primary"])


def _plot(run: RunView, lag: Any, task: str, path: Path) -> bool:
    from matplotlib.figure import Figure

    pts = _points(run, lag, task)
    if pts.empty:
        return False
    bw = run.intervals.by_world
    bw = bw[(bw["teacher_lag_days"] == lag) & (bw["domain"] == run.domain)
            & (bw["task"] == task)]
    several = len(run.intervals.worlds) > 1
    fig = Figure(figsize=(7.0, 1.6 + 0.45 * len(pts)), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(pts))[::-1]
    for yi, r in zip(y, pts.itertuples(), strict=True):
        color = "black" if r.primary else "tab:gray"
        if math.isfinite(r.lo) and math.isfinite(r.hi):
            ax.plot([r.lo, r.hi], [yi, yi], color=color, linewidth=2.4 if r.primary else 1.2)
        ax.plot([r.point], [yi], linestyle="none", color=color,
                marker="s" if r.primary else "o", markersize=7 if r.primary else 6,
                markerfacecolor=color if r.primary else "white")
        if several:
            w = bw[bw["variant"] == r.variant]["vs_kd"].dropna().to_numpy()
            ax.plot(w, np.full(len(w), yi + 0.22), linestyle="none", marker="x",
                    color="tab:blue", markersize=5, alpha=0.8)
    ax.axvline(0.0, color="tab:red", linewidth=1, linestyle="--")
    labels = [f"{v} (= −ΔNE(KD))" if v == BASELINE else v for v in pts["variant"]]
    ax.set_yticks(y, labels)
    ax.set_ylim(-0.7, len(pts) - 0.3)
    ax.set_xlabel("ΔNE − ΔNE(KD) = NE(KD) − NE(variant)  (right of 0: better than plain KD)")
    handles = [ax.plot([], [], color="black", linewidth=2.4, marker="s",
                       label="primary: Holm-adjusted interval")[0],
               ax.plot([], [], color="tab:gray", marker="o", markerfacecolor="white",
                       label="exploratory: 95 % interval")[0]]
    if several:
        handles.append(ax.plot([], [], linestyle="none", marker="x", color="tab:blue",
                               label="each world's point")[0])
    fig.legend(handles=handles, fontsize=8, loc="outside lower center", ncol=len(handles))
    ax.set_title(in_units(f"{run.name}: {task}, domain {run.domain}, teacher lag {lag_str(lag)} "
                          "days", report_unit(run.run_dir, run.spec)[0], keep=(run.name,)),
                 fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    atomic_write_bytes(path, buf.getvalue())
    return True
