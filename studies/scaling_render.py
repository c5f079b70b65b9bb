"""docs/results/SCALING.md and its plots from the transfer-scaling study's run directories
(:mod:`studies.scaling_study`): the points' rows, the report's intervals at each point, the
curves against the teacher's data, and the rank agreement of the methods between the smallest
and the largest point. Every sentence that states a finding is made from the numbers, so a
rerun at another size rewrites it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pandas as pd

from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.run_dir.results_schema import BASELINE, KD
from gemkd.transfer.io.atomic import atomic_write_bytes
from studies.scaling_points import (
    Point,
    check_student_rows,
    phase_table,
    read_point,
    seed_deltas,
    summary,
    teacher_share,
    vs_kd_order,
)
from studies.scaling_rank import RankAgreement, rank_agreement, verdict_agreement

if TYPE_CHECKING:
    from studies.scaling_study import ScalingConfig



def png_names(page: Path) -> tuple[str, str]:
    """The page's two plots, named after it (SCALING.md: scaling_curves.png, scaling_ranks.png)
    so that two studies' pages can share a folder."""
    stem = page.stem.lower()
    return f"{stem}_curves.png", f"{stem}_ranks.png"


AXIS = """\
**The axis: days of history, every surface.** Every point is the same three-domain world; the
teacher (GEM, `small_lean`) streams every domain over the last D days before the student's days
begin (`teacher_stream_start = T − D`), so every point's teacher is as old as the others (its
last day is the day before the student's first) and differs only in how much it has seen.
GEM's claim is that the foundation model sees far more than any vertical model: all surfaces
and a long history. Both are teacher-only data here — the student learns from one surface
(stories) over a few days at every point — and of the two, history is the one that can grow
while the student's rows stay byte for byte the same: more surfaces or more users would need
another world (the generator draws users, ads and domain mixes from one seed, so
`n_domains` or `n_users` changes every row the student sees), and more users would grow the
student's own data too. At D = 1 the teacher has seen every surface for one day; every point
keeps all surfaces, so the curves measure history at a fixed surface count. The domain FMs
(`hierarchical`) and the LoopFM codes (`kd_repr`, `full`) learn from the last min(D, {cap})
days (`teacher_window_days`): never more than GEM itself saw. The teacher's capacity is not a
second axis here (every point's GEM is `small_lean`): a second axis doubles the study, which
the 2-core budget does not afford."""

LARGE_LOG = """\
**The 16M-row recipe is not a point of this curve**, and why its picture differs
([../guides/scale.md](../guides/scale.md#a-16m-row-log-from-import-to-report-on-one-machine)):
there plain KD gained nothing (ΔNE +0.0022 [−0.0008, +0.0051]) and `kd_repr` beat KD by
+0.0504 [+0.0461, +0.0547]. What differs from these worlds: (1) the generator — an imported
event log (`benchmarks.import_log --signal`: click and buy from user and item factors, no
drift, no domains that interact) instead of the synthetic ads world; (2) the student's data
per id — 1.2M rows over 200,000 users (~6 a user) against ~{per_user:.0f} a user here, so the
student's own user table learns little there and the teacher's codes carry what it cannot;
(3) the teacher — 2 days of 1M rows against the feed student's 1.2M (~1.7×; this page's points
are {multiples}), one epoch of a wider GEM with tables for every id rather than a stream over
the days before, and far ahead of its student at that multiple (NE 0.8924 against the
labels-only student's 0.9522), where this page's smallest teacher closes {small_share:.0f} % of its
student's gap to the oracle (NE {small_teacher:.4f} against {small_base:.4f}). So that run moved the
student's sparsity and the teacher's lead at a small multiple, not the teacher's history;
its reversal says that the teacher's codes pay most where the student sees each user rarely,
which is a different axis from this page's."""


def _ci(v: float, lo: float, hi: float, digits: int = 4) -> str:
    if math.isnan(v):
        return "—"
    if math.isnan(lo) or math.isnan(hi):
        return f"{v:+.{digits}f}"
    return f"{v:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it is inside it (a page names no machine's
    folders), else as given."""
    from studies.scaling_study import ROOT

    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _days(n: int) -> str:
    return f"{n} day" if n == 1 else f"{n} days"


def _floor2(x: float) -> str:
    """``x`` rounded down to 2 decimals: a range's low end that no world falls below (0.995×
    shows as 0.99×, not as 1.00×)."""
    return f"{math.floor(100 * x) / 100:.2f}"


def _ceil2(x: float) -> str:
    return f"{math.ceil(100 * x) / 100:.2f}"


def _span(days: Any) -> str:
    """A spec's half-open day range ``[a, b]`` as it means: ``[a, b)``."""
    a, b = (int(x) for x in days)
    return f"[{a}, {b})"


def _mark(verdict: Any) -> str:
    return " **✓**" if isinstance(verdict, str) and verdict in ("real gain", "beats KD") else \
        (" **✗**" if isinstance(verdict, str) and verdict in ("real loss", "below KD") else "")


def _color(variant: str, variants: list[str]) -> str:
    """One colour per variant on every panel and plot (the baseline black)."""
    if variant == BASELINE:
        return "black"
    return f"C{[v for v in variants if v != BASELINE].index(variant)}"


def _x_label(p: Point) -> str:
    return f"D = {p.days} ({p.multiple:.1f}×)"


def plot_curves(points: list[Point], summ: pd.DataFrame, shares: dict[int, pd.DataFrame],
                variants: list[str], path: Path | IO[bytes]) -> None:
    """Four panels against the teacher's rows over the student's (log scale): ΔNE,
    ΔNE − ΔNE(KD), the transfer ratio, and the teacher's share of the oracle gap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    x = {p.days: p.multiple for p in points}
    panels = [("delta_ne", "ΔNE vs the labels-only student", [v for v in variants
                                                              if v != BASELINE]),
              ("vs_kd", "ΔNE − ΔNE(KD)", vs_kd_order(variants)),
              ("tr", "transfer ratio (ΔNE / teacher's own ΔNE)", [v for v in variants
                                                                   if v != BASELINE])]
    for ax, (stat, title, vs) in zip(axes.flat[:3], panels, strict=True):
        for i, v in enumerate(vs):
            d = summ[summ.variant == v].sort_values("days")
            if d.empty:
                continue
            xs = d["days"].map(x) * (1 + 0.04 * (i - len(vs) / 2))  # side by side
            y = d[stat]
            ax.errorbar(xs, y, yerr=[(y - d[f"{stat}_lo"]).clip(lower=0),
                                     (d[f"{stat}_hi"] - y).clip(lower=0)],
                        marker="o", capsize=3, label=v, color=_color(v, variants))
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(title, fontsize=10)
    ax = axes.flat[3]
    for p in points:
        s = shares[p.days]["share"]
        ax.scatter([x[p.days]] * len(s), 100 * s, color="grey", s=12, zorder=2)
    m = [100 * shares[p.days]["share"].mean() for p in points]
    ax.plot([x[p.days] for p in points], m, marker="o", color="black", zorder=3,
            label="mean over worlds")
    ax.set_title("teacher's share of the student's gap to the oracle (%)", fontsize=10)
    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.margins(x=0.12)
        ax.set_xticks([x[p.days] for p in points], [_x_label(p) for p in points], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("teacher's days of every domain (teacher rows ÷ student rows)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def plot_ranks(small: Point, large: Point, deltas: dict[int, pd.DataFrame],
               path: Path | IO[bytes]) -> None:
    """Each variant's mean ΔNE at the smallest point against the largest: per world (small
    markers) and over worlds (large)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    a = deltas[small.days].groupby(level=0).mean()
    b = deltas[large.days].groupby(level=0).mean()
    for v in a.columns:
        color = _color(v, list(a.columns))
        ax.scatter(a[v], b[v], color=color, s=14, alpha=0.6)
        ax.scatter(a[v].mean(), b[v].mean(), color=color, s=80, edgecolor="black", label=v)
    lo = min(a.min().min(), b.min().min())
    hi = max(a.max().max(), b.max().max())
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")
    ax.set_xlabel(f"ΔNE at {_x_label(small)}")
    ax.set_ylabel(f"ΔNE at {_x_label(large)}")
    ax.set_title("the same variants at the smallest and the largest teacher", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def _setup_lines(cfg: ScalingConfig, points: list[Point], spec: dict[str, Any],
                 rows: pd.DataFrame) -> list[str]:
    data = spec.get("data", {})
    tuning = spec.get("tuning", {})
    worlds = list(rows.index)
    student = (spec.get("student") or {}).get("class_path")
    lines = [
        f"Worlds: {len(worlds)} replicate worlds (seeds {worlds}) of the `{data.get('preset')}` "
        f"preset at {data.get('n_users', 0):,} users and {data.get('examples_per_day', 0):,} "
        f"impressions a day over {data.get('n_days')} days; the student ({student}) streams"
        f" days {_span(spec['student_days'])} of "
        f"`{spec.get('student_domain')}` and is evaluated on {_span(spec['eval_days'])}; "
        f"{len(spec.get('seeds', []))} training seeds per world; each variant's knobs searched "
        f"with {tuning.get('trials')} trials per final seed; lag 0. (The benchmark, "
        "experiments/benchmark.yaml, runs 8 worlds × 3 seeds and 8 trials; the study at that "
        "size, 1 to 32 days, is `studies/scaling_large.yaml`, run by `studies/scaling_gpu.sh`.)",
        "",
        "| point | teacher's days | teacher rows per world | student rows per world | "
        "teacher ÷ student (mean, range) | domain FM / codes window |",
        "|---|---|---|---|---|---|"]
    for p in points:
        d = p.data.set_index("world")
        lines.append(
            f"| D = {p.days} | {_span(d['teacher_days'].iloc[0])} | "
            + ", ".join(f"{int(r):,}" for r in d["teacher_rows"]) + " | "
            + ", ".join(f"{int(r):,}" for r in d["student_rows"]) + " | "
            f"{p.multiple:.1f}× ({_floor2(d['ratio'].min())}–{_ceil2(d['ratio'].max())}) | "
            f"{_days(min(p.days, cfg.window_cap))} |")
    same = (f" of the same worlds (the cached data steps {', '.join(points[0].data_steps)} at "
            "every point)" if points[0].data_steps else "")
    lines += ["", f"The student's rows are the same at every point, world by world,{same} — "
              "checked by the study, which stops where they differ: only the teacher's data "
              "moves. The multiple varies by world because each world draws its own domain "
              "mix."]
    return lines


def _result_table(points: list[Point], summ: pd.DataFrame, shares: dict[int, pd.DataFrame],
                  variants: list[str]) -> list[str]:
    lines = ["| point | teacher NE | labels-only NE | teacher's share of the oracle gap | "
             + " | ".join(f"{v} ΔNE" for v in variants if v != BASELINE) + " |",
             "|---|---:|---:|---:|" + "---:|" * len([v for v in variants if v != BASELINE])]
    for p in points:
        sh = shares[p.days]
        cells = []
        for v in variants:
            if v == BASELINE:
                continue
            r = summ[(summ.days == p.days) & (summ.variant == v)]
            cells.append(_ci(*r[["delta_ne", "delta_ne_lo", "delta_ne_hi"]].iloc[0])
                         + _mark(r["gain_verdict"].iloc[0]) if len(r) else "—")
        lines.append(f"| {_x_label(p)} | {sh['ne_teacher'].mean():.4f} | "
                     f"{sh['ne_baseline'].mean():.4f} | {100 * sh['share'].mean():.1f} % ± "
                     f"{100 * sh['share'].std(ddof=1):.1f} | " + " | ".join(cells) + " |")
    lines += ["", "| point | " + " | ".join(f"{v} − KD" for v in vs_kd_order(variants))
              + " | " + " | ".join(f"TR {v}" for v in variants if v != BASELINE) + " |",
              "|---|" + "---:|" * (len(vs_kd_order(variants))
                                   + len([v for v in variants if v != BASELINE]))]
    for p in points:
        s = summ[summ.days == p.days].set_index("variant")
        cells = [(_ci(*s.loc[v, ["vs_kd", "vs_kd_lo", "vs_kd_hi"]]) + _mark(s.loc[v, "kd_verdict"]))
                 if v in s.index else "—" for v in vs_kd_order(variants)]
        cells += [_ci(s.loc[v, "tr"], s.loc[v, "tr_lo"], s.loc[v, "tr_hi"], digits=2)
                  if v in s.index else "—" for v in variants if v != BASELINE]
        lines.append(f"| {_x_label(p)} | " + " | ".join(cells) + " |")
    return lines


def _step_lines(points: list[Point], summ: pd.DataFrame, shares: dict[int, pd.DataFrame],
                variants: list[str]) -> list[str]:
    """Point to point: the teacher's share of the oracle gap and each variant's ΔNE, changed."""
    out = []
    moved = [v for v in variants if v != BASELINE]
    for p, q in zip(points, points[1:], strict=False):
        d = summ.set_index(["days", "variant"])["delta_ne"]
        cells = [f"{d[q.days, v] - d[p.days, v]:+.4f} ({v})" for v in moved
                 if (p.days, v) in d.index and (q.days, v) in d.index]
        share = 100 * (shares[q.days]["share"].mean() - shares[p.days]["share"].mean())
        out.append(f"- D = {p.days} → {q.days} ({p.multiple:.1f}× → {q.multiple:.1f}×): the "
                   f"teacher's share of the oracle gap {share:+.1f} points; ΔNE "
                   + ", ".join(cells) + ".")
    return out


def _trend_lines(points: list[Point], summ: pd.DataFrame, variants: list[str]) -> list[str]:
    a, b = points[0].days, points[-1].days
    out = []
    for v in [KD, *vs_kd_order(variants)]:
        s = summ[summ.variant == v].set_index("days")
        if a not in s.index or b not in s.index:
            continue
        stat = "delta_ne" if v == KD else "vs_kd"
        name = "ΔNE(kd)" if v == KD else f"ΔNE({v}) − ΔNE(KD)"
        pa, pb = s.loc[a], s.loc[b]
        change = pb[stat] - pa[stat]
        out.append(f"- {name}: {_ci(pa[stat], pa[stat + '_lo'], pa[stat + '_hi'])} at D = {a} "
                   f"→ {_ci(pb[stat], pb[stat + '_lo'], pb[stat + '_hi'])} at D = {b} "
                   f"({change:+.4f}; verdict {pa['kd_verdict' if v != KD else 'gain_verdict']}"
                   f" → {pb['kd_verdict' if v != KD else 'gain_verdict']}).")
    tr = summ[(summ.days == b) & summ.variant.isin(vs_kd_order(variants))].set_index("variant")
    kd_tr = summ[(summ.days == b) & (summ.variant == KD)]["tr"]
    if len(kd_tr) and kd_tr.iloc[0] > 0 and tr["tr"].notna().any():
        out.append(f"- GEM's claim is ~2× standard KD's transfer: at D = {b} the transfer ratio "
                   f"is {kd_tr.iloc[0]:.2f} for KD and " + ", ".join(
                       f"{r.tr:.2f} ({r.tr / kd_tr.iloc[0]:.1f}×) for {v}"
                       for v, r in tr.iterrows() if pd.notna(r.tr))
                   + " — ratios of means whose own intervals overlap; the test of a method "
                   "against KD is its ΔNE − ΔNE(KD) interval above.")
    return out


def _rank_lines(ra: RankAgreement, small: Point, large: Point,
                agree: pd.DataFrame, adjacent: list[tuple[int, int, RankAgreement]],
                summ: pd.DataFrame, shares: dict[int, pd.DataFrame], variants: list[str]
                ) -> list[str]:
    lines = [
        f"Ranked by mean ΔNE (the labels-only student at 0), best first: at D = {small.days} "
        f"{', '.join(ra.order_small)}; at D = {large.days} {', '.join(ra.order_large)}.", "",
        f"**Kendall's tau between the two orders: {ra.tau:+.2f} "
        f"[{ra.tau_lo:+.2f}, {ra.tau_hi:+.2f}]** (95 % percentile interval of {ra.n_boot:,} "
        f"resamples of the worlds and of the seeds within them, {ra.n_units} world × seed "
        f"units paired across the points; tau > 0 in {100 * ra.p_positive:.0f} % of them); "
        f"Spearman's rho {ra.rho:+.2f}. Per world: "
        + ", ".join(f"world {w} {t:+.2f}" for w, t in ra.per_world.items())
        + f". The best variant is the same at both points in {100 * ra.same_best:.0f} % of the "
        "resamples.", ""]
    if adjacent:
        lines += ["Neighbouring points: " + "; ".join(
            f"D = {a} → {b}: tau {r.tau:+.2f} [{r.tau_lo:+.2f}, {r.tau_hi:+.2f}]"
            for a, b, r in adjacent) + ".", ""]
    if len(agree):
        kept = int(agree["same"].sum())
        lines += [f"The report's verdicts against KD at D = {small.days} and D = {large.days}: "
                  f"{kept} of {len(agree)} the same ("
                  + "; ".join(f"{v}: {r.small} → {r.large}" for v, r in agree.iterrows())
                  + ").", ""]
    best = ("the same best variant" if ra.order_small[0] == ra.order_large[0] else
            f"a different best variant ({ra.order_small[0]} → {ra.order_large[0]})")
    if ra.tau_lo > 0:
        head = (f"**Finding: the smallest teacher's order of the methods agrees with the "
                f"largest's more than chance would** (tau {ra.tau:+.2f}, the interval above 0), "
                f"with {best}.")
    elif ra.tau_hi < 0:
        head = (f"**Finding: the order of the methods reversed between the smallest and the "
                f"largest teacher** (tau {ra.tau:+.2f}, the interval below 0), with {best}.")
    else:
        head = (f"**Finding: not resolved — this study cannot say that a pilot at the smallest "
                f"teacher ranks the methods as the largest does** (tau {ra.tau:+.2f}, the "
                f"interval includes 0), with {best}.")
    lines += [head, "", "What a pilot at the smallest teacher supports and what it does not, "
              "from this page's numbers:", *_pilot_lines(ra, small, large, agree, summ, shares,
                                                         variants)]
    return lines


def _pilot_lines(ra: RankAgreement, small: Point, large: Point, agree: pd.DataFrame,
                 summ: pd.DataFrame, shares: dict[int, pd.DataFrame], variants: list[str]
                 ) -> list[str]:
    """The guidance on a small pilot, each bullet made from the page's numbers."""
    s = summ[summ.days == small.days].set_index("variant")
    lg = summ[summ.days == large.days].set_index("variant")
    moved = [v for v in variants if v != BASELINE and v in s.index and v in lg.index]
    grew = {v: lg.loc[v, "delta_ne"] - s.loc[v, "delta_ne"] for v in moved}
    share_a = 100 * shares[small.days]["share"].mean()
    share_b = 100 * shares[large.days]["share"].mean()
    best = ("the same best variant" if ra.order_small[0] == ra.order_large[0]
            else "a different best variant")
    out = [f"- the order, in this study: {best} and tau {ra.tau:+.2f} [{ra.tau_lo:+.2f}, "
           f"{ra.tau_hi:+.2f}] between a teacher that closes {share_a:.0f} % of the oracle gap "
           f"and one that closes {share_b:.0f} %;",
           "- not the sizes: ΔNE changed by " + ", ".join(f"{grew[v]:+.4f} ({v})" for v in moved)
           + f" from D = {small.days} to D = {large.days}"
           + ("; every gain grew with the teacher, so a pilot at the small teacher understates "
              "them" if all(g > 0 for g in grew.values()) else
              "; not every gain grew with the teacher") + ";"]
    if len(agree):
        unadj = [v for v in agree.index if v in s.index
                 and (s.loc[v, "vs_kd_lo"] > 0 or s.loc[v, "vs_kd_hi"] < 0)]
        all_open = bool((agree[["small", "large"]] == "not resolved").all().all())
        out.append("- not the verdicts: "
                   + ("no comparison against KD is resolved after Holm at either point, so "
                      "they carry no signal at this size" if all_open else
                      f"{int(agree['same'].sum())} of {len(agree)} verdicts against KD are the "
                      "same at both points" + "".join(
                          f"; {v}: {r['small']} at D = {small.days} → {r['large']} at D = "
                          f"{large.days}, which a pilot at the small teacher would not have "
                          "found" if r["large"] != "not resolved" else
                          f"; {v}: {r['small']} at D = {small.days} → {r['large']} at D = "
                          f"{large.days}" for v, r in agree.iterrows() if not r["same"]))
                   + (f"; at D = {small.days} {', '.join(unadj)} beat"
                      + ("s" if len(unadj) == 1 else "") + " KD unadjusted, a hint, not a "
                      "verdict" if unadj else "") + ";")
    n_worlds = len(set(ra.per_world))
    out.append(f"- and the interval on tau is over {n_worlds} worlds: a percentile bootstrap "
               "over few top-level units is too narrow (over 3 worlds it missed ~27 % of the "
               "time in the benchmark's calibration, experiments/benchmark.yaml), so read it as "
               "optimistic; per world tau ranged "
               f"{min(ra.per_world.values()):+.2f} to {max(ra.per_world.values()):+.2f}.")
    return out


def _phase_lines(points: list[Point]) -> list[str]:
    ph = phase_table(points)
    if ph.empty or ph.values.sum() == 0:
        return ["No phases.json in the run directories (the runs did no work this time)."]
    cols = list(ph.columns)
    lines = ["| point | " + " | ".join(cols) + " | total |", "|---|" + "---:|" * (len(cols) + 1)]
    for d, r in ph.iterrows():
        lines.append(f"| D = {d} | " + " | ".join(f"{r[c]:.1f}" for c in cols)
                     + f" | {r.sum():.1f} |")
    return lines + ["", "Wall minutes per phase of each point's last `gemkd run` (phases.json), "
                    "on the machine and load it ran on; a step an earlier run made with the "
                    "same config and code is reused from the cache, not remade, and costs next "
                    "to nothing here."]


def render(cfg: ScalingConfig, command: str, page: Path, task: str = "click"
           ) -> tuple[str, dict[str, bytes]]:
    """The text of ``page`` and its plots' bytes (name → PNG) from the finished points."""
    import io

    curves_png, ranks_png = png_names(page)
    ready = [d for d in cfg.teacher_days if (cfg.run_dir(d) / RunDir.INTERVALS).is_file()]
    missing = [d for d in cfg.teacher_days if d not in ready]
    if len(ready) < 2:
        raise ValueError(f"the study needs at least two finished points; finished: {ready} "
                         f"(run directories under {cfg.out})")
    spec = RunDir(cfg.run_dir(ready[0])).spec() or {}
    domain = str(spec.get("student_domain"))
    variants = [str(v) for v in cfg.sets.get("variants", spec.get("variants", []))]
    points = [read_point(d, cfg.run_dir(d), domain, task) for d in ready]
    rows = check_student_rows(points)
    print("[scaling] the student's training rows per world (rows) at each point's D (columns), "
          f"the same at every point:\n{rows.to_string()}", flush=True)
    summ = summary(points, variants)
    shares = {p.days: teacher_share(p) for p in points}
    deltas = {p.days: seed_deltas(p, variants) for p in points}
    small, large = points[0], points[-1]
    ra = rank_agreement(deltas[small.days], deltas[large.days])
    adjacent = [(a.days, b.days, rank_agreement(deltas[a.days], deltas[b.days]))
                for a, b in zip(points, points[1:], strict=False)] if len(points) > 2 else []
    others = summ[summ.variant.isin(vs_kd_order(variants))]
    agree = verdict_agreement(others[others.days == small.days],
                              others[others.days == large.days], "kd_verdict")
    users = (spec.get("data") or {}).get("n_users") or 1
    per_user = float(rows.iloc[:, 0].mean()) / users
    lines = ["# How transfer changes as the teacher knows more", "",
             f"Generated by `{command}`; do not edit by hand. Each point is a run "
             f"directory `{_shown(cfg.out)}/d<D>/` (not committed) with its report.md and "
             "intervals.csv.", ""]
    if missing:
        lines += [f"**Incomplete:** the points D = {missing} have not finished; the page shows "
                  f"D = {ready}. Rerun the same command to finish them (finished steps are "
                  "cached).", ""]
    lines += ["## Setup", "", AXIS.format(cap=cfg.window_cap), "",
              *_setup_lines(cfg, points, spec, rows), "",
              "## Transfer against the teacher's data", "",
              f"`{task}` on `{domain}`, lag 0. Every interval is the report's (`gemkd report`: t "
              "intervals over the worlds' seed-averaged values; intervals.csv of each point); "
              "**✓** / **✗** the report's verdict at that point, a real gain / loss (ΔNE) or "
              "beats / below KD (− KD columns). The primary comparisons (plain KD's ΔNE and every "
              "− KD column) are Holm-adjusted within the point's primary family (the report's "
              "rule), so a primary interval that excludes 0 without a mark is resolved only "
              "unadjusted; the other variants' ΔNE verdicts are the report's exploratory ones "
              "(unadjusted). TR = ΔNE / (NE(baseline) − NE(teacher)), — where the report "
              "leaves it empty: the teacher's advantage NE(baseline) − NE(teacher) has an "
              "interval that does not lie above 0 (a ratio to noise). The "
              "teacher's share of the oracle gap is (NE(baseline) − NE(teacher)) / "
              "(NE(baseline) − NE(oracle)), mean ± std over worlds.", "",
              *_result_table(points, summ, shares, variants), "",
              f"![curves]({curves_png})", "",
              f"From the smallest to the largest teacher ({small.multiple:.1f}× → "
              f"{large.multiple:.1f}× the student's rows; the teacher's share of the oracle gap "
              f"{100 * shares[small.days]['share'].mean():.1f} % → "
              f"{100 * shares[large.days]['share'].mean():.1f} %):", "",
              *_trend_lines(points, summ, variants), "",
              "Point by point (the means; their intervals are in the tables):", "",
              *_step_lines(points, summ, shares, variants), "",
              "## Do small runs predict large ones?", "",
              *_rank_lines(ra, small, large, agree, adjacent, summ, shares, variants), "",
              f"![ranks]({ranks_png})", "",
              "## The 16M-row run", "", LARGE_LOG.format(
                  per_user=per_user, multiples=", ".join(f"{p.multiple:.1f}×" for p in points),
                  small_share=100 * shares[small.days]["share"].mean(),
                  small_teacher=shares[small.days]["ne_teacher"].mean(),
                  small_base=shares[small.days]["ne_baseline"].mean()), "",
              "## Cost", "", *_phase_lines(points), ""]
    curves, ranks = io.BytesIO(), io.BytesIO()
    plot_curves(points, summ, shares, variants, curves)
    plot_ranks(small, large, deltas, ranks)
    pngs = {curves_png: curves.getvalue(), ranks_png: ranks.getvalue()}
    return "\n".join(lines), pngs


def write_page(cfg: ScalingConfig, path: Path, command: str, task: str = "click") -> Path:
    """Render the page and write it and its PNGs beside it, each atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text, pngs = render(cfg, command, path, task)
    for name, data in pngs.items():
        atomic_write_bytes(path.parent / name, data)
    atomic_write_bytes(path, text.encode("utf-8"))
    return path
