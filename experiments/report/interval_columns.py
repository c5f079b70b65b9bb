"""The columns of a run's interval tables (``intervals.csv``) and the verdict words they hold
(:mod:`gemkd.experiments.report.intervals` makes the tables)."""

from __future__ import annotations

from gemkd.experiments.report.table_names import WORLD
from gemkd.experiments.run_dir.results_schema import CELL_KEYS, KD

GAIN, LOSS, UNRESOLVED = "real gain", "real loss", "not resolved"
BEATS, BELOW = "beats KD", "below KD"
COLUMNS = [
    *CELL_KEYS, "ne", "ne_lo", "ne_hi", "delta_ne", "delta_ne_lo", "delta_ne_hi",
    "efficiency_vs_kd", "efficiency_lo", "efficiency_hi", "vs_kd", "vs_kd_lo", "vs_kd_hi",
    "transfer_ratio", "tr_lo", "tr_hi", "n_worlds", "worlds_agree_delta_ne", "worlds_agree_vs_kd",
    "gain_verdict", "kd_verdict", "delta_ne_half_width", "vs_kd_half_width",
    "delta_ne_p", "vs_kd_p", "teacher_ne", "teacher_ne_lo", "teacher_ne_hi",
    "teacher_vs_baseline", "teacher_vs_baseline_lo", "teacher_vs_baseline_hi",
    "teacher_vs_baseline_p",
]
WORLD_COLUMNS = [*CELL_KEYS, WORLD, "n_seeds", "ne", "delta_ne", "vs_kd", "efficiency_vs_kd"]

#: What :attr:`Intervals.interval_method` names, in words (the report's rule paragraph).
METHOD_TEXT = {
    "t-worlds": "t intervals over the worlds' paired, seed-averaged values (W − 1 degrees of "
                "freedom; each world's users and seeds are inside their spread), never "
                "narrower than the fixed-effect interval of each world's own seed-to-seed "
                "noise (a random-effects interval with the Hartung–Knapp variance and its ad "
                "hoc floor)",
    "pivot-seeds": "intervals on one world from the evaluation users' variance (a paired, "
                   "user-level bootstrap) plus the training seeds' variance over their "
                   "number, the latter with its S − 1 degrees of freedom (a generalized pivot: "
                   "Student's t when the seeds' noise dominates, the normal when the users' "
                   "does)",
    "users-only": "intervals on one world and one training seed from a paired, user-level "
                  "bootstrap: the seed-to-seed noise is not in them",
    "none": "no intervals (no per-user evaluation files)",
}


#: statistic → (point column, lower, upper) of :data:`COLUMNS`
STAT_COLUMNS = {
    "ne": ("ne", "ne_lo", "ne_hi"),
    "delta": ("delta_ne", "delta_ne_lo", "delta_ne_hi"),
    "eff": ("efficiency_vs_kd", "efficiency_lo", "efficiency_hi"),
    "vs_kd": ("vs_kd", "vs_kd_lo", "vs_kd_hi"),
    "tr": ("transfer_ratio", "tr_lo", "tr_hi"),
}


def verdict(lo: float, hi: float, above: str, below: str) -> str:
    """``above``/``below`` when the interval excludes 0 on that side; otherwise not resolved —
    a nan interval included."""
    if lo > 0:
        return above
    if hi < 0:
        return below
    return UNRESOLVED


def labels(reference: str = KD) -> tuple[str, str]:
    """The verdict words of a difference against ``reference``: ("beats KD", "below KD") for
    plain KD, else ("beats <reference>", "below <reference>")."""
    return (BEATS, BELOW) if reference == KD else (f"beats {reference}", f"below {reference}")
