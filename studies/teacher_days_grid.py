"""What more teacher data is worth to the student: plain KD's and ``full``'s ΔNE against the
days of data the teacher learnt from, at equal age.

Each point is a ``gemkd run`` of the streaming benchmark at lag 0 with a later
``teacher_stream_start`` (a teacher of fewer days, as old as the full one), e.g.::

    for d in 5 10 20; do gemkd run experiments/benchmark.yaml --set data.seeds=[0] \\
        --set teacher_lag_days=0 --set teacher_stream_start=$((30 - d)) \\
        --set 'variants=[baseline,kd,full]' --out runs/teacher_days_$d; done
    python -m studies.teacher_days_grid --runs runs/teacher_days_5 runs/teacher_days_10 \\
        runs/teacher_days_20 runs/benchmark --world 0 --markdown grid.md --plot grid.png

A run with several lags or worlds contributes its lag 0 of ``--world`` only (the benchmark's
30-day point), read from its per-world rows; ΔNE intervals are the runs' own (``intervals.csv``)
where the run has that one world, else mean ± std over seeds of that world.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd

from gemkd.experiments.run_dir import RunDir, read_csv
from gemkd.experiments.run_dir.results_schema import BASELINE, KD

VARIANTS = (KD, "full")


def grid_point(run: Path, world: int, domain: str, task: str) -> dict[str, Any]:
    """One run's teacher days and rows, the teacher's NE and shares, and each variant's ΔNE."""
    rd = RunDir(run)
    data = rd.teacher_data()[str(world)]["0"]
    results = rd.results()
    r = results[(results.world == world) & (results.teacher_lag_days == 0)
                & (results.domain == domain) & (results.task == task)]
    base = r[r.variant == BASELINE]
    b = base["ne"]
    point: dict[str, Any] = {
        "run": str(run), "days": data["teacher_days"][1] - data["teacher_days"][0],
        "teacher_rows": data["teacher_rows"], "ratio": data["ratio"],
        "ne_teacher": float(base["ne_teacher"].mean()), "ne_baseline": float(b.mean()),
        "share_oracle": float(((b - base["ne_teacher"]) / (b - base["ne_oracle"])).mean()),
        "share_feature_oracle": float(((b - base["ne_teacher"])
                                       / (b - base["ne_feature_oracle"])).mean())}
    iv_path = rd / RunDir.INTERVALS  # written by gemkd report
    iv = read_csv(iv_path) if iv_path.is_file() else None
    one_world = results.world.nunique() == 1
    for v in VARIANTS:
        d = r[r.variant == v].delta_ne
        point[f"{v}_delta_ne"] = float(d.mean())
        lo = hi = None
        if iv is not None and one_world:
            row = iv[(iv.teacher_lag_days == 0) & (iv.domain == domain) & (iv.task == task)
                     & (iv.variant == v)]
            if len(row):
                lo, hi = float(row.delta_ne_lo.iloc[0]), float(row.delta_ne_hi.iloc[0])
        if lo is None:  # mean ± 2 std over seeds
            s = float(d.std(ddof=1)) if len(d) > 1 else 0.0
            lo, hi = point[f"{v}_delta_ne"] - 2 * s, point[f"{v}_delta_ne"] + 2 * s
        point[f"{v}_lo"], point[f"{v}_hi"] = lo, hi
    return point


def markdown(points: pd.DataFrame, domain: str, task: str) -> str:
    lines = [f"ΔNE = NE(baseline) − NE(variant) on the evaluation days ({domain}, {task}), "
             "lag 0, against the teacher's days of data (equal age):", "",
             "| teacher days | teacher rows (× student's) | teacher NE | share of oracle gap | "
             "share of feature-oracle gap | " + " | ".join(f"{v} ΔNE [95 %]" for v in VARIANTS)
             + " |", "|" + "---:|" * (5 + len(VARIANTS))]
    for _, p in points.sort_values("days").iterrows():
        cells = [f"{p[f'{v}_delta_ne']:.4f} [{p[f'{v}_lo']:.4f}, {p[f'{v}_hi']:.4f}]"
                 for v in VARIANTS]
        lines.append(f"| {p['days']} | {p['teacher_rows']:,} ({p['ratio']:.1f}×) | "
                     f"{p['ne_teacher']:.4f} | {100 * p['share_oracle']:.1f} % | "
                     f"{100 * p['share_feature_oracle']:.1f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(points: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = points.sort_values("days")
    fig, ax = plt.subplots(figsize=(6, 4))
    for v in VARIANTS:
        y = p[f"{v}_delta_ne"]
        ax.errorbar(p["days"], y, yerr=[y - p[f"{v}_lo"], p[f"{v}_hi"] - y], marker="o",
                    capsize=3, label=v)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("days of data the teacher learnt from (same age)")
    ax.set_ylabel("ΔNE vs labels-only student")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, required=True)
    p.add_argument("--world", type=int, default=0)
    p.add_argument("--domain", default=None, help="default: the runs' student_domain")
    p.add_argument("--task", default="click")
    p.add_argument("--markdown", type=Path, default=None)
    p.add_argument("--plot", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    domain = args.domain or (RunDir(args.runs[0]).spec() or {}).get("student_domain")
    if domain is None:
        p.error(f"--domain: {args.runs[0]}/spec.yaml names no student_domain")
    points = pd.DataFrame([grid_point(r, args.world, domain, args.task) for r in args.runs])
    text = markdown(points, domain, args.task)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.plot:
        plot(points, args.plot)
    if args.json:
        args.json.write_text(points.to_json(orient="records", indent=2))
    return points


if __name__ == "__main__":
    main()
