"""What each gain costs: the student's training speed against the labels-only
baseline's, and the inputs it needs at serving beyond the baseline's.

The speed is ``examples_per_second`` of results.csv (the final run's training pass, the teacher
lookups and the methods' own work included), each run against the baseline's of the same world
and seed, then averaged. What a method needs at serving follows from its ``needs``: a method
that feeds the student representation features reads them at inference too (``codes``: the
user's LoopFM codes from a code store; ``pairs``: SOLARIS pair vectors from a pair store),
while the teacher's logits, representations and weights (``teacher``, ``teacher_emb``,
``teacher_weights``) are used in training only."""

from __future__ import annotations

import math

import pandas as pd

from gemkd.experiments.report.summary import RunView, f4, md_table
from gemkd.experiments.run_dir.results_schema import BASELINE, WORLD
from gemkd.transfer.errors import GemkdError

#: A method's need (DESIGN §5.1) → what the served student then reads besides its features.
SERVING: dict[str, str] = {
    "codes": "the user's LoopFM codes (a code-store lookup per request)",
    "pairs": "SOLARIS pair vectors (a pair-store lookup per request)",
}


def serving_inputs(spec: dict | None) -> dict[str, list[str]] | None:
    """Variant → the inputs it needs at serving beyond the baseline's (empty: none); None when
    spec.yaml is absent or its variants cannot be resolved (a plug-in not importable here)."""
    from gemkd.experiments.run.methods import variant_needs
    from gemkd.experiments.spec.run_spec import DEFAULT_VARIANTS, expand_twins, parse_variants

    if spec is None:
        return None
    try:
        variants = parse_variants(spec.get("variants") or list(DEFAULT_VARIANTS))
        twins = spec.get("twins") or {}
        if isinstance(twins, dict) and twins:
            variants = expand_twins(variants, {str(k): int(n) for k, n in twins.items()})
        return {v.name: [SERVING[n] for n in sorted(variant_needs(v)) if n in SERVING]
                for v in variants}
    except (GemkdError, ImportError, TypeError, ValueError):
        return None


def speed_ratios(run: RunView) -> dict[str, tuple[float, float, float, float]]:
    """Variant → (mean over runs of its examples/s over the baseline's on the same world and
    seed, its mean examples/s, the lowest and the highest ratio) on the main lag; empty without
    the column or a baseline."""
    cell = run.cell()
    if "examples_per_second" not in cell.columns:
        return {}
    keys = [k for k in (WORLD, "seed") if k in cell.columns]
    per_run = cell.drop_duplicates(["variant", *keys])[["variant", *keys, "examples_per_second"]]
    base = per_run[per_run["variant"] == BASELINE].set_index(keys)["examples_per_second"]
    if base.empty:
        return {}
    joined = per_run.join(base.rename("base"), on=keys)
    joined["ratio"] = joined["examples_per_second"] / joined["base"]
    out = {}
    for variant, g in joined.groupby("variant", sort=False):
        ratio = pd.to_numeric(g["ratio"], errors="coerce").dropna()
        speed = pd.to_numeric(g["examples_per_second"], errors="coerce").dropna()
        if len(ratio):
            out[str(variant)] = (float(ratio.mean()), float(speed.mean()),
                                 float(ratio.min()), float(ratio.max()))
    return out


def cost_section(run: RunView) -> list[str]:
    """``## What each gain costs``: ΔNE beside the training speed against the baseline's and the
    extra inputs at serving; nothing when the run records neither."""
    speeds, serving = speed_ratios(run), serving_inputs(run.spec)
    if not speeds and serving is None:
        return []
    if run.has_intervals:
        iv = run.interval_rows().set_index("variant")
        gains = {v: f4(iv.at[v, "delta_ne"]) for v in iv.index}
    else:
        rows = run.rows().set_index("variant")
        gains = {v: f4(rows.at[v, "delta_ne_mean"]) for v in rows.index}
    table = []
    for v in run.variants:
        if v == BASELINE:
            continue
        ratio, speed, low, high = speeds.get(v, (math.nan,) * 4)
        spread = f"{low:.2f}–{high:.2f}×, " if high > low else ""
        speed_cell = (f"{ratio:.2f}× ({spread}{speed:,.0f} /s)" if math.isfinite(ratio)
                      else "—")
        extra = ("unknown" if serving is None or v not in serving else
                 "; ".join(serving[v]) or "none")
        table.append([v, gains.get(v, "—"), speed_cell, extra])
    base = speeds.get(BASELINE)
    where = f" (its {base[1]:,.0f} examples/s)" if base else ""
    return [f"## What each gain costs (domain {run.domain}, task {run.task})", "",
            f"Training speed is each run's examples/s against the labels-only baseline's{where} "
            "on the same world and seed (mean over runs; the teacher lookups and the methods' "
            "own work included, so it measures this machine, not a served model; the range is the "
            "runs' lowest and highest ratio: on a machine other jobs share, a range wider than "
            "the differences between variants says the speeds mean nothing). Extra inputs "
            "at serving are what the served student reads beyond the baseline's features: KD, "
            "the auxiliary head, the Student Adapter and parameter sharing use the teacher in "
            "training only.", "",
            md_table(("variant", "ΔNE vs baseline", "training speed vs baseline",
                      "extra inputs at serving"), table), ""]
