"""Validation NE against each tuned knob, one PNG per variant (``plots/tuning_<variant>.png``):
where the search looked, where it chose, and whether the choice sits against a bound. matplotlib's
``Figure`` directly (no pyplot: no global backend, no display), as experiments/report/plots.py."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pandas as pd

from gemkd.experiments.report.tuning_table import edge_text
from gemkd.transfer.io.atomic import atomic_write_bytes

_PER_ROW = 4


def _save(fig: Any, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _x(values: pd.Series, log: bool | None) -> tuple[pd.Series, list[str] | None, bool]:
    """Plot positions for a knob's values: numbers as they are (on a log axis if ``log``; None:
    when positive and spanning 100× or more), anything else as categories in order of first
    appearance."""
    numeric = pd.to_numeric(values, errors="coerce")
    if numeric.notna().all():
        if log is None:
            log = bool((numeric > 0).all() and numeric.max() >= 100 * numeric.min())
        return numeric.astype(float), None, bool(log and (numeric > 0).all())
    labels = list(dict.fromkeys(values.astype(str)))
    return values.astype(str).map(labels.index).astype(float), labels, False


def _log_axis(ax: Any, x: pd.Series) -> None:
    """A log x axis labelled in plain numbers (1, 2, 5, 10, ...), not 2×10⁰."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    short = x.max() < 100 * x.min()  # under two decades: label 2 and 5 between the powers
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(FuncFormatter(
        lambda v, _: f"{v:g}" if short and f"{v:.0e}"[0] in "25" else ""))


def _study_label(lag: Any, world: Any, draw: Any = None) -> str:
    label = f"lag {int(lag)}"
    if world is not None and not (isinstance(world, float) and math.isnan(world)):
        label += f", world {int(world)}"
    if draw is not None and not (isinstance(draw, float) and math.isnan(draw)):
        label += f", seed {int(draw)}"  # one final seed's own search (tuning.draws: per_seed)
    return label


def plot_variant(rows: pd.DataFrame, variant: str, path: Path,
                 log_knobs: Collection[str] | None = None) -> Path:
    """One subplot per knob of ``variant``: every trial's validation NE, coloured by study
    (lag, world, draw), the chosen trial a black-edged star, the title naming an edge choice."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    params = list(dict.fromkeys(rows["param"]))
    ncols = min(len(params), _PER_ROW)
    nrows = math.ceil(len(params) / ncols)
    fig = Figure(figsize=(3.6 * ncols, 3.0 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    none = pd.Series(None, index=rows.index)
    world = rows["world"] if "world" in rows.columns else none
    draw = rows["draw"] if "draw" in rows.columns else none
    study = [_study_label(lag, w, d) for lag, w, d in zip(rows["teacher_lag_days"], world, draw,
                                                           strict=True)]
    rows = rows.assign(_study=study)
    studies = list(dict.fromkeys(study))
    cmap = colormaps["tab10"]
    for ax, param in zip(axes, params, strict=False):
        g = rows[rows["param"] == param]
        x, labels, log = _x(g["value"], None if log_knobs is None else param in log_knobs)
        for i, name in enumerate(studies):
            mask = (g["_study"] == name).to_numpy()
            ax.scatter(x[mask], g["val_ne"][mask], s=18, color=cmap(i % 10), alpha=0.8,
                       label=name if len(studies) > 1 else None)
        chosen = g["chosen"].astype(bool).to_numpy()
        ax.scatter(x[chosen], g["val_ne"][chosen], s=120, marker="*", color="gold",
                   edgecolors="black", zorder=3)
        edge = edge_text(g.loc[chosen, "at_edge"]) if "at_edge" in g else []
        sides = sorted({s for s in edge if s in ("low", "high")})
        ax.set_title(param + (f" (at edge: {', '.join(sides)})" if sides else ""),
                     color="tab:red" if sides else "black", fontsize=10)
        if log:
            _log_axis(ax, x)
        if labels is not None:
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
        ax.set_xlabel(param)
        ax.set_ylabel("validation NE")
        ax.grid(alpha=0.3)
    for ax in axes[len(params):]:
        ax.set_visible(False)
    if len(studies) > 1:
        axes[0].legend(fontsize=7)
    fig.suptitle(f"{variant}: validation NE of every trial (★ chosen)", fontsize=11)
    return _save(fig, path)


def write_tuning_plots(tuning: pd.DataFrame, out_dir: Path,
                       log_knobs: Collection[str] | None = None) -> list[Path]:
    """``out_dir/tuning_<variant>.png`` for every variant with tuned knobs in ``tuning``
    (``tuning.csv``'s rows); return the paths written. Failed trials (NaN) are left out.
    ``log_knobs``: the knobs to plot on a log axis — those searched in log,
    ``{k for space in spaces for k, r in space.items() if getattr(r, "log", False)}`` — else
    guessed from the values (positive, spanning 100× or more)."""
    if tuning.empty:
        return []
    rows = tuning[pd.to_numeric(tuning["val_ne"], errors="coerce").notna()]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for variant, g in rows.groupby("variant", sort=False):
        name = re.sub(r"[^A-Za-z0-9._=-]+", "_", str(variant))
        written.append(plot_variant(g.reset_index(drop=True), str(variant),
                                    out_dir / f"tuning_{name}.png", log_knobs))
    return written
