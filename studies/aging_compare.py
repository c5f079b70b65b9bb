"""Does the synthetic world age like the logs? Two ``teacher_aging.py`` results side by side.

    python -m studies.aging_compare \\
        --real benchmarks/results/teacher_aging_kuairand.json --real-group all \\
        --synthetic benchmarks/results/teacher_aging_synthetic.json --synthetic-group all \\
        [--task click] [--metric ne_eval] [--plot OUT.png] [--markdown OUT.md]

Both results must come from the same protocol (windows of equal length, ages in days, the same
evaluation convention); the comparison is of the *shape*: each curve is drawn relative to its own
age-0 value (the worlds differ in how predictable they are, not only in how fast that decays).
The default metric is ``ne_eval`` (log loss over the entropy of the evaluation rows' own rate: a
rescaled log loss, so a window whose base rate differs from the evaluation's does not move it;
``ne`` divides by each window's own rate, the library's convention, and so also carries base-rate
drift). A model's aging rate *matches* when each world's slope lies inside the other's 95 %
interval; *overlaps* when only the intervals overlap.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pandas as pd


def load(path: str | Path, group: str, task: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The curve and slope rows of one ``teacher_aging.py --json`` result for (group, task)."""
    data = json.loads(Path(path).read_text())
    curve, slopes = pd.DataFrame(data["curve"]), pd.DataFrame(data["slopes"])
    curve = curve[(curve.group == group) & (curve.task == task)]
    slopes = slopes[(slopes.group == group) & (slopes.task == task)]
    if curve.empty:
        raise SystemExit(f"{path}: no rows for group {group!r}, task {task!r}")
    return curve, slopes


def compare(real: pd.DataFrame, synthetic: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per model (and model difference) in both: the two slopes and intervals, and the verdict."""
    rows = []
    for model in dict.fromkeys(real.model):
        r = real[(real.model == model) & (real.metric == metric)]
        s = synthetic[(synthetic.model == model) & (synthetic.metric == metric)]
        if r.empty or s.empty:
            continue
        r, s = r.iloc[0], s.iloc[0]
        inside = r.lo <= s.slope <= r.hi and s.lo <= r.slope <= s.hi
        overlap = r.lo <= s.hi and s.lo <= r.hi
        rows.append({"model": model, "real": r.slope, "real_lo": r.lo, "real_hi": r.hi,
                     "synthetic": s.slope, "synthetic_lo": s.lo, "synthetic_hi": s.hi,
                     "verdict": "match" if inside else "overlap" if overlap else "differ"})
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, labels: tuple[str, str], metric: str) -> str:
    lines = [f"Slope of {metric} against age, per day [95 % interval]:", "",
             f"| model | {labels[0]} | {labels[1]} | verdict |", "|---|---:|---:|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.model} | {r.real:+.5f} [{r.real_lo:+.5f}, {r.real_hi:+.5f}] | "
                     f"{r.synthetic:+.5f} [{r.synthetic_lo:+.5f}, {r.synthetic_hi:+.5f}] | "
                     f"{r.verdict} |")
    return "\n".join(lines) + "\n"


def plot(curves: dict[str, pd.DataFrame], metric: str, task: str, path: str | Path) -> Path:
    """Each model's curve relative to its age-0 value, one line per (world, model), bars =
    the interval shifted by the same amount."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for i, (label, curve) in enumerate(curves.items()):
        for j, (model, d) in enumerate(curve.groupby("model", sort=False)):
            d = d.sort_values("age")
            y0 = float(d[d.age == d.age.min()][metric].iloc[0])
            y = d[metric].to_numpy() - y0
            err = [y - (d[f"{metric}_lo"].to_numpy() - y0), (d[f"{metric}_hi"].to_numpy() - y0) - y]
            ax.errorbar(d["age"] + 0.1 * (2 * i + j - 1.5), y, yerr=err, marker="os"[i],
                        ls="-" if j == 0 else "--", capsize=3, color=f"C{i}",
                        label=f"{label}: {model}")
    ax.axhline(0, color="0.6", lw=1)
    ax.set_xlabel("age of the training window (days before the evaluation)")
    ax.set_ylabel(f"{metric} − its value at age 0 ({task})")
    ax.set_title("Aging: a real log and the synthetic world, same protocol")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--real", required=True, help="teacher_aging.py --json of a real log")
    p.add_argument("--real-group", default="all")
    p.add_argument("--real-name", default="KuaiRand")
    p.add_argument("--synthetic", required=True, help="teacher_aging.py --json of the world")
    p.add_argument("--synthetic-group", default="all")
    p.add_argument("--synthetic-name", default="synthetic")
    p.add_argument("--task", default="click")
    p.add_argument("--metric", default="ne_eval", choices=["ne_eval", "ne", "calibration"])
    p.add_argument("--plot", default=None)
    p.add_argument("--markdown", default=None)
    args = p.parse_args(argv)
    real_curve, real_slopes = load(args.real, args.real_group, args.task)
    syn_curve, syn_slopes = load(args.synthetic, args.synthetic_group, args.task)
    table = compare(real_slopes, syn_slopes, args.metric)
    labels = (f"{args.real_name} ({args.real_group})",
              f"{args.synthetic_name} ({args.synthetic_group})")
    text = markdown(table, labels, args.metric)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.plot:
        plot({labels[0]: real_curve, labels[1]: syn_curve}, args.metric, args.task, args.plot)
    return {"table": table}


if __name__ == "__main__":
    main()
