"""The orders and names the report's tables use, and the sentence of a run's thread counts. The
report reads the run directory through :class:`~gemkd.experiments.run_dir.RunDir` (results.csv
validated by :mod:`gemkd.experiments.run_dir.results_schema`, tuning.csv, curves/, spec.yaml,
environment.json); any problem is a one-line ConfigError naming the file, column and row."""

from __future__ import annotations

from pathlib import Path

from gemkd.experiments.run_dir import CURVE_METRICS, RunDir, read_csv  # noqa: F401
from gemkd.experiments.run_dir.results_schema import (  # noqa: F401 (the report's names for them)
    ALL,
    CELL_KEYS,
    NUMERIC_COLUMNS,
    OPTIONAL_NUMERIC,
    REQUIRED_COLUMNS,
    WORLD,
    validate_results,
)
from gemkd.experiments.spec.run_spec import BUILTIN_VARIANTS

#: Canonical order of the variants: the built-in ones' (DESIGN §5); unknown variants follow,
#: sorted by name.
VARIANTS: tuple[str, ...] = tuple(BUILTIN_VARIANTS)
#: Metrics summarised as ``<metric>_mean`` / ``<metric>_std`` by :func:`summarize`.
METRICS: tuple[str, ...] = (
    "ne", "delta_ne", "transfer_ratio", "efficiency_vs_kd", "gap_closed", "auc", "calibration",
    "ne_baseline", "ne_teacher", "ne_oracle", "ne_source", "ne_feature_oracle",
    "auc_teacher", "calibration_teacher", "examples_per_second",
)
#: Columns of newer runs; an older results.csv without them reads as NaN.
OPTIONAL_METRICS: tuple[str, ...] = ("ne_source", "ne_feature_oracle", "auc_teacher",
                                     "calibration_teacher", "examples_per_second")
PLOT_NAMES: tuple[str, ...] = (
    "ne_by_variant.png", "transfer_ratio.png", "ne_vs_lag.png", "training_curves.png",
)
FIRST_TASK = "click"


def threads_text(run: str | Path | RunDir) -> str:
    """The torch thread counts a run was made at (``environment.json``), as a sentence: its
    numbers reproduce only at the same counts (torch's CPU sums depend on them, and a search
    amplifies the difference). Empty for a run without the file."""
    env = (run if isinstance(run, RunDir) else RunDir(run)).environment()
    if "threads" not in env:
        return ""
    steps, runs = env["threads"], env.get("run_threads")
    made = (f"Made at {steps} torch thread(s) in the command's process (teacher, store, domain "
            "FM, codes) and " + (f"{runs} in each student run" if runs is not None else
                                 "an unrecorded count in the student runs"))
    again = (f"; `--threads {steps}` reproduces it on the same kind of CPU (another rounds "
             "differently: spec key robustness marks the verdicts that depend on it)"
             if runs == steps else "")
    return (f"{made}: another count gives other last digits and can move a search's choices "
            f"(docs/guides/experiments.md, Reproducing a table){again}.")
