"""The plots of a run directory (DESIGN §6.1): the forest plots of the verdicts
(:mod:`gemkd.experiments.report.forest`), NE by variant (the seeds' spread, labelled as such),
transfer ratio, NE vs lag, training curves. matplotlib's ``Figure`` directly (no pyplot: no
global backend, no display)."""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemkd.experiments.report.day_unit import in_units, report_unit
from gemkd.experiments.report.forest import write_forest_plots
from gemkd.experiments.report.summary import RunView, f4, lag_str, variant_order
from gemkd.experiments.report.table_names import CURVE_METRICS
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.run_dir.results_schema import BASELINE
from gemkd.transfer.io.atomic import atomic_write_bytes

_REF_STYLE = {
    "ne_baseline": (BASELINE, "tab:gray", "--"),
    "ne_teacher": ("teacher", "black", "-."),
    "ne_oracle": ("oracle", "tab:green", ":"),
    "ne_feature_oracle": ("feature oracle", "tab:olive", ":"),
}


def _save(fig: Any, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def _colors(variants: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {v: cmap(i % 10) for i, v in enumerate(variants)}


def write_run_plots(run: RunView) -> list[Path]:
    """Write the run's PNGs under ``run.dir/plots/`` (atomically); return the paths written.

    ``forest_<task>_lag<L>.png`` only with intervals, ``transfer_ratio.png`` only where some
    task has a transfer ratio (:func:`no_ratio_reason`), ``ne_vs_lag.png`` only with more than
    one lag, ``training_curves.png`` only with ``curves/*.csv``; a stale one of those from an
    earlier report is removed.
    """
    from matplotlib.figure import Figure  # no pyplot: no global backend, no display

    pdir = run.dir / RunDir.PLOTS
    pdir.mkdir(parents=True, exist_ok=True)
    colors = _colors(run.variants)
    written = [*write_forest_plots(run),
               _plot_ne_by_variant(run, Figure, colors, pdir / "ne_by_variant.png")]
    optional: dict[str, Path | None] = {"transfer_ratio.png": None, "ne_vs_lag.png": None,
                                        "training_curves.png": None}
    if not no_ratio_reason(run):
        optional["transfer_ratio.png"] = _plot_transfer_ratio(run, Figure, colors,
                                                              pdir / "transfer_ratio.png")
    if len(run.lags) > 1:
        optional["ne_vs_lag.png"] = _plot_ne_vs_lag(run, Figure, colors, pdir / "ne_vs_lag.png")
    curves = run.run_dir.curves()
    if curves is not None:
        optional["training_curves.png"] = _plot_curves(run, curves, Figure, colors,
                                                       pdir / "training_curves.png")
    for name, path in optional.items():
        if path is None:
            (pdir / name).unlink(missing_ok=True)
        else:
            written.append(path)
    return written


def _task_axes(fig: Any, n: int) -> list[Any]:
    return list(fig.subplots(1, n, squeeze=False)[0])


def _plot_ne_by_variant(run: RunView, Figure: Any, colors: dict, path: Path) -> Path:
    fig = Figure(figsize=(4.8 * len(run.tasks), 4.2), layout="constrained")
    for ax, task in zip(_task_axes(fig, len(run.tasks)), run.tasks, strict=True):
        rows = run.rows(task=task)
        names = rows["variant"].tolist()
        means, stds = rows["ne_mean"].to_numpy(), np.nan_to_num(rows["ne_std"].to_numpy())
        ax.bar(range(len(names)), means, yerr=stds, capsize=3,
               color=[colors[v] for v in names])
        levels = list(means - stds) + list(means + stds)
        for col, (mean, _) in run.reference(task=task).items():
            if col in _REF_STYLE and math.isfinite(mean):
                label, color, style = _REF_STYLE[col]
                ax.axhline(mean, color=color, linestyle=style, linewidth=1.2,
                           label=f"{label} {f4(mean)}")
                levels.append(mean)
        levels = [x for x in levels if math.isfinite(x)]
        if levels:
            lo, hi = min(levels), max(levels)
            pad = max((hi - lo) * 0.15, 1e-3)
            ax.set_ylim(lo - pad, hi + pad)
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right")
        ax.set_ylabel("NE (lower is better; y axis zoomed)")
        ax.set_title(f"{task}: domain {run.domain}, lag {lag_str(run.lag)}")
        ax.legend(fontsize=8)
    fig.suptitle(f"{run.name}: NE by variant, mean ± std over seeds: the seeds' spread, not an "
                 "interval (verdicts: the forest plots)", fontsize=10)
    return _save(fig, path)


def _ratios(run: RunView, task: str) -> pd.DataFrame:
    """Per variant (the baseline left out) of a task's main slice: the transfer ratio and the
    half-lengths of its bar's error (with intervals: the interval's ends, nan where TR is not
    defined; else mean ± std over seeds)."""
    if run.has_intervals:
        iv = run.interval_rows(task=task)
        iv = iv[iv["variant"] != BASELINE]
        tr = iv["transfer_ratio"].to_numpy(dtype=float)
        return pd.DataFrame({"variant": iv["variant"].to_numpy(), "tr": tr,
                             "minus": tr - iv["tr_lo"].to_numpy(dtype=float),
                             "plus": iv["tr_hi"].to_numpy(dtype=float) - tr})
    rows = run.rows(task=task)
    rows = rows[rows["variant"] != BASELINE]
    std = rows["transfer_ratio_std"].to_numpy(dtype=float)
    return pd.DataFrame({"variant": rows["variant"].to_numpy(),
                         "tr": rows["transfer_ratio_mean"].to_numpy(dtype=float),
                         "minus": std, "plus": std})


def no_ratio_reason(run: RunView, task: str | None = None) -> str:
    """Why no transfer ratio is drawn for ``task`` (None: for any task), or "" when one is:
    TR = ΔNE / (NE(baseline) − NE(teacher)) is a share of the teacher's advantage, and a
    teacher that is not better than the baseline has none to share."""
    tasks = [task] if task is not None else run.tasks
    if any(np.isfinite(_ratios(run, t)["tr"]).any() for t in tasks):
        return ""
    which = f"on {task}" if task is not None else "on any task"
    rule = ("its interval does not lie above 0" if run.has_intervals
            else "it is not above 0 on every seed")
    return (f"no transfer ratio {which}: TR divides by the teacher's advantage NE(baseline) − "
            f"NE(teacher), and {rule} (domain {run.domain}, teacher lag {lag_str(run.lag)} "
            "days), so there is no share of it to draw")


def _plot_transfer_ratio(run: RunView, Figure: Any, colors: dict, path: Path) -> Path:
    fig = Figure(figsize=(4.8 * len(run.tasks), 4.2), layout="constrained")
    for ax, task in zip(_task_axes(fig, len(run.tasks)), run.tasks, strict=True):
        r = _ratios(run, task)
        names = r["variant"].tolist()
        if not np.isfinite(r["tr"]).any():
            ax.text(0.5, 0.5, "\n".join(textwrap.wrap(no_ratio_reason(run, task), 40)),
                    ha="center", va="center", transform=ax.transAxes, fontsize=8)
            ax.set_axis_off()
            ax.set_title(f"{task}: domain {run.domain}, lag {lag_str(run.lag)}")
            continue
        means = np.array([_finite(x) for x in r["tr"]])
        err = np.nan_to_num(np.stack([r["minus"], r["plus"]]), nan=0.0, posinf=0.0,
                            neginf=0.0)
        ax.bar(range(len(names)), means, yerr=err, capsize=3,
               color=[colors[v] for v in names])
        ax.axhline(1.0, color="black", linestyle="-.", linewidth=1, label="all of the teacher's "
                   "advantage")
        ax.axhline(0.0, color="tab:gray", linewidth=0.8)
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right")
        ax.set_ylabel("transfer ratio ΔNE_VM / ΔNE_FM")
        ax.set_title(f"{task}: domain {run.domain}, lag {lag_str(run.lag)}")
        ax.legend(fontsize=8)
    spread = ("95 % interval (Fieller); a variant without a bar has no defined ratio"
              if run.has_intervals else "mean ± std over seeds")
    fig.suptitle(f"{run.name}: transfer ratio ({spread})")
    return _save(fig, path)


def _plot_ne_vs_lag(run: RunView, Figure: Any, colors: dict, path: Path) -> Path:
    fig = Figure(figsize=(4.8 * len(run.tasks), 4.2), layout="constrained")
    s = run.summary[run.summary["domain"] == run.domain]
    for ax, task in zip(_task_axes(fig, len(run.tasks)), run.tasks, strict=True):
        st = s[s["task"] == task]
        for v in run.variants:
            sv = st[st["variant"] == v].sort_values("teacher_lag_days")
            ax.errorbar(sv["teacher_lag_days"], sv["ne_mean"],
                        yerr=np.nan_to_num(sv["ne_std"].to_numpy()), marker="o", capsize=3,
                        color=colors[v], label=v)
        teacher = [run.reference(lag=lag, task=task)["ne_teacher"][0] for lag in run.lags]
        ax.plot(run.lags, teacher, color="black", linestyle="-.", marker="x", label="teacher")
        ax.set_xlabel(in_units("teacher lag (days)", report_unit(run.run_dir, run.spec)[0]))
        ax.set_ylabel("NE (lower is better)")
        ax.set_title(f"{task}: domain {run.domain}")
        ax.legend(fontsize=7)
    fig.suptitle(f"{run.name}: NE vs teacher staleness")
    return _save(fig, path)


def _plot_curves(run: RunView, curves: pd.DataFrame, Figure: Any, colors: dict,
                 path: Path) -> Path:
    """Validation NE, the one measure every variant shares, on one axis; each loss on an axis
    per variant: a variant's training loss is its own objective (labels only, labels + KD,
    + the auxiliary head's term ...), so two variants' losses on one axis compare different
    sums."""
    lag = run.lag if (curves["teacher_lag_days"] == run.lag).any() else \
        sorted(curves["teacher_lag_days"].unique())[0]
    c = curves[curves["teacher_lag_days"] == lag]
    metrics = [m for m in CURVE_METRICS if m in c.columns and c[m].notna().any()]
    shared = [m for m in metrics if m == "val_ne"]
    losses = [m for m in metrics if m != "val_ne"]
    variants = variant_order(c["variant"], run.order)
    with_loss = [v for v in variants if losses and c.loc[c["variant"] == v, losses]
                 .notna().any().any()]
    teacher = teacher_val_curves(run, lag)
    ncols = max(1, len(with_loss))
    nrows = max(1, len(shared) + len(losses) + bool(teacher))
    fig = Figure(figsize=(3.6 * ncols, 3.2 * nrows), layout="constrained")
    grid = fig.subplots(nrows, ncols, squeeze=False)
    for ax in grid.flat:
        ax.set_axis_off()
    if teacher:
        _plot_teacher(grid[nrows - 1][0], teacher)
    if shared:
        ax = grid[0][0]
        ax.set_axis_on()
        for v in variants:
            mean = c[c["variant"] == v].groupby("step")["val_ne"].mean().dropna()
            if not mean.empty:
                ax.plot(mean.index, mean.to_numpy(), color=colors.get(v), label=v)
        ax.set_xlabel("step")
        ax.set_ylabel("val_ne")
        ax.set_title("validation NE, every variant (mean over seeds)", fontsize=9)
        ax.legend(fontsize=7)
    for row, metric in enumerate(losses, start=len(shared)):
        for col, v in enumerate(with_loss):
            mean = c[c["variant"] == v].groupby("step")[metric].mean().dropna()
            if mean.empty:
                continue
            ax = grid[row][col]
            ax.set_axis_on()
            ax.plot(mean.index, mean.to_numpy(), color=colors.get(v))
            ax.set_xlabel("step")
            ax.set_ylabel(metric)
            ax.set_title(f"{v}: {metric} (its own objective)", fontsize=9)
    title = (f"{run.name}: training curves, teacher lag {lag_str(lag)} (mean over seeds; each "
             "variant's losses on their own axes" + ("; the teacher fit's validation NE"
                                                     if teacher else "") + ")")
    fig.suptitle("\n".join(textwrap.wrap(title, 60 * ncols)), fontsize=10)
    return _save(fig, path)


#: label → (epochs, validation NE, the epoch kept)
TeacherCurves = dict[str, tuple[list[int], list[float], int | None]]


def teacher_val_curves(run: RunView, lag: Any) -> TeacherCurves:
    """The teacher fits' validation NE by epoch at ``lag`` (``teacher_fit.json``): label (task,
    and world where there are several) → (epochs, NE, the epoch kept); empty for a fit without
    validation days, an imported store or a run before the file."""
    fits: dict[str, dict[str, Any]] = {}
    for w, entries in run.run_dir.teacher_fit().items():
        e = entries.get(lag_str(lag))
        if isinstance(e, dict) and e.get("val_curve"):
            fits[w] = e
    out: TeacherCurves = {}
    for w, e in sorted(fits.items()):
        tasks = list(dict.fromkeys(t for p in e["val_curve"] for t in p.get("ne", {})))
        for task in tasks:
            points = [(int(p["epoch"]), float(p["ne"][task])) for p in e["val_curve"]
                      if task in p.get("ne", {})]
            label = task + (f", world {w}" if len(fits) > 1 else "")
            out[label] = ([x for x, _ in points], [y for _, y in points], e.get("chosen_epoch"))
    return out


def _plot_teacher(ax: Any, curves: TeacherCurves) -> None:
    """The teacher fit's validation NE per epoch, a line per task (and world), the kept epoch
    circled: the curve that shows a teacher memorising ids after its first epoch."""
    ax.set_axis_on()
    for label, (epochs, ne, kept) in curves.items():
        line = ax.plot(epochs, ne, marker=".", label=label)[0]
        if kept in epochs:
            ax.plot([kept], [ne[epochs.index(kept)]], marker="o", markersize=9,
                    markerfacecolor="none", color=line.get_color())
    ax.set_xticks(sorted({e for epochs, _, _ in curves.values() for e in epochs}))
    ax.set_xlabel("teacher epoch")
    ax.set_ylabel("validation NE")
    ax.set_title("teacher (GEM) fit: validation NE by epoch (○ kept)", fontsize=9)
    ax.legend(fontsize=7)
