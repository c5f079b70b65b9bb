"""CI's A/A check of the report's verdicts: simulated runs whose truth is
known, drawn like a run's clusters/ files (gemkd.transfer.metrics.null_sim), pushed through the
report's own interval and verdict code (lag_intervals), for every run shape the project ships —
one world × 3 seeds (quickstart, MovieLens, KuaiRand), 3 × 3 (today's benchmark), 8 × 3 (the
planned one) — with users or seeds dominating the noise, both alike, and (several worlds) a
per-world effect of a search draw's size (0.004 NE per arm).

Each shape × noise is 1,000 runs at once (one "task" per run). Null comparisons (a placebo
against the baseline, a twin of KD against KD) must give ≤ 5 % false verdicts two-sided and
≈ 2.5 % each side, and the two-sided p-value ≤ 1 % in ≈ 1 % of runs; known effects (KD's ΔNE
0.01, a variant 0.004 NE better than KD) must be covered at least 93 % and at most 98 %. Bounds
add three Monte-Carlo standard errors where a rate is checked per cell (one cell's rate is an
estimate from 1,000 runs), two for the rate pooled over every cell. Why 98 %: one world's pivot
is exact when seeds or users dominate and conservative when they are alike (~97.5 % at worst,
gemkd.transfer.metrics.contrasts) — the price of staying valid at every level
(Welch–Satterthwaite df misses 7–8 % there); several worlds' intervals are never narrower than
the fixed-effect one of the worlds' own seed noise, which widens some
intervals in every mix (up to 97.2 % where users dominate) and, where worlds differ by their
seeds only (the ``seeds``, ``balanced`` and ``agree`` mixes), makes them conservative
(coverage up to 99.5 %, 0.4 % false verdicts on 3 worlds: no upper bound there) — the price of
never resolving on world means that agree by chance (its own test below). The rule of earlier
versions (benchmarks/percentile_rule.py) must fail the same check.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.percentile_rule import PERCENTILE
from gemkd.experiments.report.cluster_files import EvalSet
from gemkd.experiments.report.intervals import IntervalRule, lag_intervals, lag_tables
from gemkd.transfer.metrics.contrasts import Units, difference
from gemkd.transfer.metrics.null_sim import (
    EFFECTS_KNOWN,
    NOISE_MIXES,
    NULLS,
    Rates,
    Scenario,
    SimWorld,
    draw_run,
    rate_se,
    score,
    seed_values,
)

RUNS = 1000
SAMPLES = 200  # user resamples inside each run (one world only; the report's default is 1,000)
MIXES = NOISE_MIXES
SHAPES = ((1, 3), (3, 3), (8, 3))
PER_WORLD = ("search", "agree")  # mixes that mean something with several worlds only
CELLS = [(w, s, mix) for w, s in SHAPES for mix in MIXES if not (mix in PER_WORLD and w == 1)]


def eval_sets(worlds: list[SimWorld]) -> list[EvalSet]:
    """The simulated worlds as the report reads them, each run a task."""
    tasks = [f"r{i}" for i in range(worlds[0].sums.n_tasks)]
    return [EvalSet(w.world, 0, tasks, ["all"], w.students, w.teachers, w.sums)
            for w in worlds]


def rates_of(table: pd.DataFrame, scenario: Scenario,
             pairs: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], Rates]:
    out = {}
    for variant, reference in pairs:
        col = "delta_ne" if reference == "baseline" else "vs_kd"
        t = table[table["variant"] == variant]
        assert len(t) == RUNS
        out[variant, reference] = score(t[f"{col}_lo"], t[f"{col}_hi"],
                                        scenario.truth(variant, reference), t[f"{col}_p"])
    return out


def simulate(worlds: int, seeds: int, mix: str, rule: IntervalRule | None = None
             ) -> tuple[Scenario, pd.DataFrame]:
    scenario = Scenario(f"ci-{worlds}x{seeds}-{mix}", worlds, seeds, users=200, **MIXES[mix])
    table, _ = lag_tables(eval_sets(draw_run(scenario, RUNS, seed=0)), SAMPLES, 0,
                          [(0.95, "kd")], rule)[0]
    return scenario, table


# thousands of simulated runs through the report's interval code (~1 min): make test-slow
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results() -> dict[tuple[int, int, str], dict[tuple[str, str], Rates]]:
    out = {}
    for cell in CELLS:
        scenario, table = simulate(*cell)
        out[cell] = rates_of(table, scenario, NULLS + EFFECTS_KNOWN)
    return out


@pytest.mark.parametrize("cell", CELLS, ids=[f"{w}x{s}-{m}" for w, s, m in CELLS])
def test_null_comparisons_give_at_most_5_percent_false_verdicts(results, cell):
    for pair in NULLS:
        r = results[cell][pair]
        assert r.miss <= 0.05 + 3 * rate_se(0.05, RUNS), (pair, r)
        assert max(r.above, r.below) <= 0.025 + 3 * rate_se(0.025, RUNS), (pair, r)
        assert r.p_at_1pct <= 0.01 + 3 * rate_se(0.01, RUNS), (pair, r)  # Holm's levels


@pytest.mark.parametrize("cell", CELLS, ids=[f"{w}x{s}-{m}" for w, s, m in CELLS])
def test_known_effects_are_covered_95_percent(results, cell):
    upper = 0.98  # one world: the pivot's conservative middle; several: the floor's
    if cell[0] > 1 and cell[2] in ("seeds", "balanced", "agree"):
        upper = 1.0  # the fixed-effect floor's price where worlds differ by their seeds only
    for pair in EFFECTS_KNOWN:
        r = results[cell][pair]
        assert 0.93 <= r.coverage <= upper, (pair, r)


def test_pooled_false_verdict_rate_is_5_percent(results):
    """Over every shape and noise: 5 % within two standard errors of 26,000 runs, not far
    below it either (an interval that never resolves would pass the per-cell check; the
    several-world floor makes the seeds-only mixes conservative: 0.4–2.6 % there)."""
    rates = [results[c][p] for c in CELLS for p in NULLS]
    n = RUNS * len(rates)
    miss = sum(r.miss for r in rates) / len(rates)
    assert 0.025 <= miss <= 0.05 + 2 * rate_se(0.05, n)
    above = sum(r.above for r in rates) / len(rates)
    assert abs(above - miss / 2) <= 3 * rate_se(0.025, n)  # both sides alike


@pytest.mark.parametrize("cell", [(1, 3, "seeds"), (3, 3, "search")], ids=["1x3-seeds",
                                                                          "3x3-search"])
def test_the_rule_of_earlier_versions_fails_the_same_check(cell):
    """The nested percentile bootstrap with a majority of worlds: 15–22 % false verdicts on one
    world when seeds dominate, ~11 % with 3 worlds and a per-world effect."""
    scenario, table = simulate(*cell, rule=PERCENTILE)
    worst = max(r.miss for r in rates_of(table, scenario, NULLS).values())
    assert worst > 0.08


def test_world_means_that_agree_by_chance_give_no_false_verdict():
    """3 worlds × 3 seeds, seeds' noise large, no per-world effect. Among the
    runs whose world means happen to agree (their spread's standard error below half the
    within-world one; ~20 % of runs), a t interval over the world means alone resolves a null
    in ~24 % of them; the report's interval stays ≤ 5 % there (2–3 %) and overall (under 1 %),
    and its half-width is never below the within-world standard error of the mean over
    worlds."""
    runs = RUNS
    scenario = Scenario("ci-agree", 3, 3, users=200, **MIXES["agree"])
    worlds = draw_run(scenario, runs, seed=1)
    table, _ = lag_intervals(eval_sets(worlds), SAMPLES, seed=0)
    for variant, reference in NULLS:
        col = "delta_ne" if reference == "baseline" else "vs_kd"
        t = table[table["variant"] == variant].set_index("task").loc[[f"r{i}" for i in
                                                                      range(runs)]]
        d = seed_values(worlds, variant, reference)  # [W, S, R]
        means = d.mean(axis=1)
        within = np.sqrt((d.var(axis=1, ddof=1) / d.shape[1]).sum(axis=0)) / d.shape[0]
        agree = means.std(axis=0, ddof=1) / np.sqrt(d.shape[0]) < within / 2
        assert agree.sum() > 100, agree.sum()
        np.testing.assert_allclose(t[col].to_numpy(), means.mean(axis=0), atol=1e-12)
        plain = difference(means.mean(axis=0), Units(means))
        false_plain = (plain.lo > 0) | (plain.hi < 0)
        false = ((t[f"{col}_lo"] > 0) | (t[f"{col}_hi"] < 0)).to_numpy()
        assert false_plain[agree].mean() > 0.1, (variant, false_plain[agree].mean())
        assert false[agree].mean() <= 0.05 and false.mean() <= 0.05, (variant, false.mean())
        half = ((t[f"{col}_hi"] - t[f"{col}_lo"]) / 2).to_numpy()
        assert (half >= within).all()
