"""The aging study's table and plot (``studies/teacher_aging.py``, docs/results/STALENESS.md)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

# ---- output -------------------------------------------------------------------------------------

def markdown(curve: pd.DataFrame, slopes: pd.DataFrame, task: str, groups: Sequence[str],
             level: float = 0.95, unit: str = "day", levels: pd.DataFrame | None = None) -> str:
    """Per group: model × age → NE ± std [interval], NE (eval rate), AUC, calibration; then the
    slopes per day of age and the differences of slopes; with ``levels``, each model minus the
    control at every age."""
    pct = f"{100 * level:.0f} %"
    out: list[str] = []
    for g in groups:
        c = curve[(curve.group == g) & (curve.task == task)]
        if c.empty:
            continue
        out += [f"### {task}, domain {g}", "",
                f"| model | age ({unit}s) | seeds | NE ± std over seeds [{pct} interval] | "
                "NE vs eval rate | AUC ± std | calibration Σp/Σy [interval] | p̄ train | p̄ eval |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in c.itertuples():
            out.append(f"| {r.model} | {r.age:g} | {r.n_seeds} | {r.ne:.4f} ± {r.ne_std:.4f} "
                       f"[{r.ne_lo:.4f}, {r.ne_hi:.4f}] | {r.ne_eval:.4f} | "
                       f"{r.auc:.4f} ± {r.auc_std:.4f} | {r.calibration:.3f} "
                       f"[{r.calibration_lo:.3f}, {r.calibration_hi:.3f}] | "
                       f"{r.base_rate_train:.4f} | {r.base_rate_eval:.4f} |")
        s = slopes[(slopes.group == g) & (slopes.task == task)]
        if c["age"].nunique() < 2:  # one age: no slope to fit
            s = s.iloc[0:0]
        out += [] if s.empty else ["", f"Least-squares slope against age, per {unit} of age "
                                   f"[{pct} interval]:", "",
                f"| model | NE / {unit} | NE vs eval rate / {unit} | calibration / {unit} |",
                "|---|---:|---:|---:|"]
        for m in dict.fromkeys(s.model):
            cells = []
            for metric in ("ne", "ne_eval", "calibration"):
                r = s[(s.model == m) & (s.metric == metric)].iloc[0]
                cells.append(f"{r.slope:+.5f} [{r.lo:+.5f}, {r.hi:+.5f}]")
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        lv = (levels[(levels.group == g) & (levels.task == task)]
              if levels is not None and not levels.empty else None)
        if lv is not None and not lv.empty:
            out += ["", f"Paired difference at each age (the same users and seeds) "
                    f"[{pct} interval]; negative NE = the first model is better:", "",
                    f"| models | age ({unit}s) | NE | NE vs eval rate | calibration |",
                    "|---|---:|---:|---:|---:|"]
            for (m, ag), d in lv.groupby(["model", "age"], sort=False):
                cells = []
                for metric in ("ne", "ne_eval", "calibration"):
                    r = d[d.metric == metric].iloc[0]
                    cells.append(f"{r['diff']:+.5f} [{r['lo']:+.5f}, {r['hi']:+.5f}]")
                out.append(f"| {m} | {ag:g} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def plot(curve: pd.DataFrame, task: str, groups: Sequence[str], path: str | Path,
         title: str = "", unit: str = "day") -> None:
    """NE against age, one line per model, error bars = the bootstrap interval; one column per
    domain group, NE against the training window's rate above and the evaluation's below (a
    window with another base rate moves the first, not the second)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend

    fig = Figure(figsize=(5 * len(groups), 7.5), layout="constrained")
    axes = fig.subplots(2, len(groups), squeeze=False)
    rows = (("ne", "NE (training window's p̄)"), ("ne_eval", "NE (evaluation days' p̄)"))
    for (metric, what), line in zip(rows, axes, strict=True):
        for ax, g in zip(line, groups, strict=True):
            c = curve[(curve.group == g) & (curve.task == task)]
            for i, (m, d) in enumerate(c.groupby("model", sort=False)):
                x = d["age"].to_numpy() + 0.08 * (i - 0.5)  # a dodge: bars do not overlap
                y = d[metric].to_numpy()  # (d.ne would be DataFrame.ne, "not equal")
                err = np.stack([y - d[f"{metric}_lo"].to_numpy(),
                                d[f"{metric}_hi"].to_numpy() - y]).clip(min=0)
                ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=m)
            ax.set_xlabel(f"age of the training window ({unit}s before the evaluation)")
            ax.set_ylabel(f"{what}, {task}")
            ax.set_title(f"{title} {task}, domain {g}".strip())
            ax.grid(alpha=0.3)
            ax.legend()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=110, format=path.suffix.lstrip(".") or "png")
    os.replace(tmp, path)  # atomic: a killed run leaves no half-written plot
