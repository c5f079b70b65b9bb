"""Holm's step-down adjustment of a family of two-sided tests (DESIGN §6), with the level of an
interval that agrees with each decision.

Why: a report that tests 30 variants against KD at 5 % each finds one or two "wins" in pure
noise. Holm's procedure keeps the chance of any false verdict in a named family at ``alpha``
(for any dependence between the tests), and rejects everything Bonferroni (``p ≤ α/m``) does
and more: sort the p-values, reject the i-th smallest while ``p_(i) ≤ α / (m − i + 1)``, stop at
the first that is not.

The interval shown beside a decision must say the same thing. A comparison Holm rejected at step
i gets the interval at level ``1 − α/(m − i + 1)`` (it excludes 0 exactly when ``p_(i)`` is below
that step's threshold, which it is); every comparison from the step where Holm stopped, k, on
gets the interval at step k's level ``1 − α/(m − k + 1)``: its p-value is at least ``p_(k)``,
above that threshold, so its interval holds 0. (Each step's own level would not do: with
p = 0.03 and 0.04 Holm rejects neither, yet the second's interval at α/1 would exclude 0.) These
are the intervals of the test's own thresholds, not simultaneous intervals: the guarantee is the
decisions' family-wise error rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Holm:
    """``[m]`` arrays in the input order: ``reject`` (Holm's decision at ``alpha``),
    ``adjusted`` (Holm's adjusted p-value, nan where p is), ``alpha`` (the two-sided error of
    the interval that agrees with the decision: the interval's level is ``1 − alpha``) and
    ``rank`` (1 = smallest p; nan p-values last)."""

    reject: np.ndarray
    adjusted: np.ndarray
    alpha: np.ndarray
    rank: np.ndarray


def holm(p: np.ndarray | list[float], alpha: float = 0.05) -> Holm:
    """Holm's step-down procedure over the two-sided p-values ``p`` at family-wise ``alpha``.
    A nan p-value (a comparison without an interval) counts in the family's size m (it cannot
    be rejected, and leaving it out would shrink every threshold's denominator) and stops the
    procedure where it stands, after every finite one."""
    if not 0 < alpha < 1:
        raise ValueError(f"holm: alpha must be in (0, 1), got {alpha}")
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    m = p.size
    order = np.argsort(np.where(np.isnan(p), np.inf, p), kind="stable")
    sorted_p = p[order]
    steps = m - np.arange(m)  # m − i + 1 for the 1-based rank i
    passes = sorted_p <= alpha / steps  # nan compares False
    stop = int(np.argmin(passes)) if not passes.all() else m  # 0-based rank Holm stops at
    reject_sorted = np.arange(m) < stop
    with np.errstate(invalid="ignore"):
        adjusted_sorted = np.minimum(np.maximum.accumulate(np.where(
            np.isnan(sorted_p), -np.inf, steps * sorted_p)), 1.0)
    adjusted_sorted = np.where(np.isnan(sorted_p), np.nan, adjusted_sorted)
    level_steps = np.where(np.arange(m) < stop, steps, m - stop)
    sorted_out = {"reject": reject_sorted, "adjusted": adjusted_sorted,
                  "alpha": alpha / np.maximum(level_steps, 1), "rank": np.arange(1, m + 1)}
    out = {}
    for key, values in sorted_out.items():
        out[key] = np.empty(m, dtype=values.dtype)
        out[key][order] = values
    return Holm(**out)
