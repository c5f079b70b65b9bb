"""The report's MDE and variance split (gemkd.experiments.report.sensitivity) and ``gemkd plan``
(gemkd.experiments.report.run_plan): columns, text, minimal sizes, errors, and the planner's
predicted half-width against reruns at the planned size in the null simulation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import gemkd
from benchmarks.plan_validation import SIM_CASES, sim_check
from gemkd.experiments.report.cluster_files import load_eval_sets
from gemkd.experiments.report.render import write_intervals, write_report_for
from gemkd.experiments.report.run_plan import plan_for, plan_run
from gemkd.experiments.report.sensitivity import CSV_COLUMNS
from gemkd.experiments.report.summary import RunView
from gemkd.experiments.report.world_arrays import world_arrays
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.contrasts import Units, covariance
from gemkd.transfer.metrics.pivot import mixed_critical
from gemkd.transfer.metrics.power import detectable, predict
from tests.experiments.report.cluster_run import make_cluster_run


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    root = make_cluster_run(tmp_path_factory.mktemp("plan_one"), worlds=(4,), seeds=(0, 1, 2, 3))
    run = RunView(root)
    write_report_for(run)
    write_intervals(run)
    return run


@pytest.fixture(scope="module")
def one_world(view):
    return view.dir


@pytest.fixture(scope="module")
def table(one_world):
    return pd.read_csv(one_world / "intervals.csv")


def test_intervals_csv_has_mde_and_split(one_world, table):
    assert set(CSV_COLUMNS) <= set(table.columns)
    r = table[(table["variant"] == "kd_aux") & (table["domain"] == "all")
              & (table["task"] == "click")].iloc[0]
    assert r["mde_power"] == 0.8
    # the interval's SE times the effect its pivot resolves at 80 %: (users' share, S − 1 df)
    sets = load_eval_sets(one_world)
    variants = list(dict.fromkeys(v for v, _ in sets[0].students))
    p = world_arrays(sets[0], variants, 200, 0)
    arms = Units(p.seed_ne, p.reps, p.n_users)
    units = arms.take(variants.index("baseline")).expand() - arms
    parts = np.maximum(covariance(units, units).comps, 0.0)[:, variants.index("kd_aux"), -1, 0]
    se = math.sqrt(parts.sum())
    assert r["delta_ne_half_width"] == pytest.approx(
        mixed_critical(0.95, parts[0] / parts.sum(), 3) * se, rel=1e-6)
    assert r["delta_ne_mde"] == pytest.approx(detectable(parts[0] / parts.sum(), 3) * se,
                                              rel=1e-3)
    assert r["delta_ne_mde"] > r["delta_ne_half_width"]
    # one world: no worlds' part; users' and seeds' parts add up to the interval's variance
    assert np.isnan(r["delta_ne_var_worlds"])
    assert r["delta_ne_var_users"] > 0 and r["delta_ne_var_seeds"] >= 0
    # the reference rows are their own reference: no MDE
    base = table[(table["variant"] == "baseline")]
    assert base["delta_ne_mde"].isna().all()


def test_holm_mde_is_on_primary_rows_only_and_stricter(table):
    primary = table["kd_family"] == "primary"
    assert primary.any()
    assert table.loc[primary, "vs_kd_mde_holm"].notna().all()
    assert (table.loc[primary, "vs_kd_mde_holm"] > table.loc[primary, "vs_kd_mde"]).all()
    assert table.loc[~primary, "vs_kd_mde_holm"].isna().all()
    m = 3  # the default family: kd_aux and kd_repr against KD, KD against the baseline
    assert table["holm_level"].dropna().iloc[0] == pytest.approx(0.05 / m)


def test_report_states_mde_split_and_plan(one_world):
    text = (one_world / "report.md").read_text()
    assert "At 80 % power and two-sided 5 % it detects a ΔNE of" in text
    assert "between evaluation users / training seeds / worlds" in text
    section = text[text.index("## Sensitivity"):]
    assert "| kd_aux |" in section.split("\n\n")[2]
    assert "To detect ΔNE − ΔNE(KD) = 0.001" in section
    assert f"gemkd plan {one_world}" in section


def test_plan_sizes_are_the_smallest_that_resolve(view):
    effect = 0.03
    plan = plan_for(view, effect, stat="delta_ne")
    c = plan.components["delta_ne"]
    opts = plan.options.set_index("option")
    seeds = opts.loc["seeds only"]
    if seeds["reached"]:
        assert seeds["mde"] <= effect
        assert predict(c, 1, int(seeds["seeds"]) - 1).mde > effect
    users = opts.loc["users only"]
    assert users["reached"] and users["mde"] <= effect
    assert predict(c, 1, 4, users["users_factor"] / 1.05).mde > effect * 0.99
    assert users["eval_users"] == pytest.approx(300 * users["users_factor"])
    worlds = opts.loc["worlds only"]
    assert worlds["interval"] == "t-worlds" and worlds["worlds"] >= 2
    assert worlds["final_runs"] == 4 * 4 * worlds["worlds"]  # variants × seeds × worlds
    assert any("assume it is 0" in n for n in plan.notes)
    text = plan.text()
    assert "| seeds only |" in text and "expected half-width" in text


def test_plan_at_holm_level_and_api(one_world, view):
    plain = plan_for(view, 0.03, stat="vs_kd")
    holm = gemkd.plan_run(one_world, 0.03, stat="vs_kd", holm=True)
    assert holm.alpha == pytest.approx(0.05 / 3)
    as_run = [p.options.set_index("option").loc["as run", "mde"] for p in (plain, holm)]
    assert as_run[1] > as_run[0]


def test_plan_refuses_what_it_cannot_plan(one_world, view, tmp_path):
    one_seed = make_cluster_run(tmp_path / "s", worlds=(4,), seeds=(0,))
    # one seed: the users' normal interval, so the MDE is (z_.975 + z_.8) / z_.975 of it
    t = RunView(one_seed).csv_table
    r = t[(t["variant"] == "kd") & (t["domain"] == "all") & (t["task"] == "click")].iloc[0]
    assert r["delta_ne_mde"] / r["delta_ne_half_width"] == pytest.approx(
        detectable(1.0, math.inf) / stats.norm.isf(0.025), rel=1e-4)
    assert r["delta_ne_var_seeds"] == 0 or np.isnan(r["delta_ne_var_seeds"])
    with pytest.raises(ConfigError, match="one seed.*at least 2 seeds"):
        plan_run(one_seed, 0.01)
    with pytest.raises(ConfigError, match="--effect must be > 0"):
        plan_run(one_world, 0.0)
    with pytest.raises(ConfigError, match="--variant 'nope'"):
        plan_for(view, 0.01, variant="nope", strict=True)


def test_plan_command_prints_and_fails_cleanly(one_world, capsys):
    from gemkd.experiments.cli import main

    assert main(["plan", str(one_world), "--effect", "0.02", "--stat", "vs_kd"]) == 0
    out = capsys.readouterr().out
    assert "Plan for an effect of 0.02 NE at 80 % power" in out
    assert "ΔNE − ΔNE(KD): variance of the run's estimate" in out
    assert main(["plan", str(one_world), "--effect", "0.02", "--task", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {one_world}: --task 'nope': the run has click, conversion"]


@pytest.mark.parametrize("case", SIM_CASES, ids=lambda c: c[3])
def test_planner_predicts_the_rerun_half_width_in_the_null_simulation(case):
    """150 pilots (1 × 3 seeds, or 3 × 3 for worlds) and 150 runs at the planned size."""
    name, pilot, planned, mix, pair = case
    got = sim_check(name, pilot, planned, mix, pair, runs=150, samples=150)
    # the planner from the true components: the report's half-width at that size
    assert got.from_truth == pytest.approx(np.mean(got.realized), rel=0.08)
    # from each pilot's own estimates: unbiased on average within ±25 %
    assert 0.8 <= got.bias <= 1.25, got.row()
