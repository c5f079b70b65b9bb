"""One variant against another (not only against plain KD): ΔNE(variant) − ΔNE(reference) with
the report's paired, user-level bootstrap nested with seeds and worlds — e.g. the Student
Adapter's own gain, kd_aux_adapter against kd_aux, per teacher lag."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from gemkd.experiments.report.clusters import has_clusters, load_eval_sets
from gemkd.experiments.report.intervals import KD, bootstrap_settings, lag_intervals
from gemkd.experiments.report.load import load_spec
from gemkd.transfer.errors import ConfigError

_ASIDE = "\0kd"  # plain KD's arms while another variant stands in as the reference


def paired_difference(run_dir: str | Path, variant: str, reference: str,
                      level: float = 0.95) -> pd.DataFrame:
    """Per lag, domain and task: ``diff`` = ΔNE(variant) − ΔNE(reference) with its interval,
    the verdict (``beats`` / ``below`` as against KD) and each world's own difference. The
    reference's arms stand in for plain KD's in the report's interval code, so the draws are
    the report's own."""
    run_dir = Path(run_dir)
    if not has_clusters(run_dir):
        raise ConfigError(f"{run_dir}: no clusters/ folder (per-user evaluation files): a run "
                          "before issue 17 has no intervals")
    sets = load_eval_sets(run_dir)
    names = {v for es in sets for v, _ in es.students}
    for name in (variant, reference):
        if name not in names:
            raise ConfigError(f"{run_dir}: no variant {name!r} (variants: "
                              f"{', '.join(sorted(names))})")
    rename = {KD: _ASIDE, reference: KD}
    sets = [dataclasses.replace(es, students=[(rename.get(v, v), s) for v, s in es.students])
            for es in sets]
    samples, seed = bootstrap_settings(load_spec(run_dir))
    rows = []
    for lag in sorted({es.lag for es in sets}):
        table, by_world = lag_intervals([es for es in sets if es.lag == lag], samples, seed,
                                        level)
        for _, r in table[table["variant"] == variant].iterrows():
            w = by_world[(by_world["variant"] == variant) & (by_world["domain"] == r["domain"])
                         & (by_world["task"] == r["task"])]
            rows.append({"teacher_lag_days": lag, "domain": r["domain"], "task": r["task"],
                         "variant": variant, "reference": reference, "diff": r["vs_kd"],
                         "diff_lo": r["vs_kd_lo"], "diff_hi": r["vs_kd_hi"],
                         "verdict": (r["kd_verdict"] if reference == KD
                                     else r["kd_verdict"].replace("KD", reference)),
                         "worlds_agree": r["worlds_agree_vs_kd"], "n_worlds": r["n_worlds"],
                         "per_world": dict(zip(w["world"], w["vs_kd"], strict=True))})
    return pd.DataFrame(rows)
