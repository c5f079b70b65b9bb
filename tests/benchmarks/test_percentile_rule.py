"""The interval rule of earlier versions (benchmarks/percentile_rule.py) through the report's
``lag_tables``: the same point estimates as the report, other bounds, no p-values, a verdict only
with a majority of worlds; the world level of its nested bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.percentile_rule import NAME, PERCENTILE, pool_worlds, run_table, world_draws
from gemkd.experiments.report.intervals import UNRESOLVED, run_intervals
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.bootstrap import interval
from tests.experiments.report.cluster_run import make_cluster_run
from tests.experiments.report.test_report import make_results, make_run


def _row(table, variant: str):
    r = table[(table["variant"] == variant) & (table["teacher_lag_days"] == 0)
              & (table["domain"] == "all") & (table["task"] == "click")]
    assert len(r) == 1
    return r.iloc[0]


def test_same_points_other_bounds_no_p_values(tmp_path):
    run = make_cluster_run(tmp_path / "w", worlds=(0, 1, 2))
    old, new = run_table(run), run_intervals(run)
    assert PERCENTILE.name == NAME and old["vs_kd_p"].isna().all()
    assert len(old) == len(new.table)
    np.testing.assert_allclose(old["ne"], new.table["ne"])
    assert not np.allclose(old["vs_kd_lo"], new.table["vs_kd_lo"])
    assert (old["vs_kd_lo"].dropna() <= old["vs_kd"][old["vs_kd_lo"].notna()]).all()


def test_a_verdict_wants_a_majority_of_worlds(tmp_path):
    """A gain in 1 world of 3 whose interval lies above 0 stays unresolved."""
    assert not PERCENTILE.resolves(1, 3) and PERCENTILE.resolves(2, 3)
    run = make_cluster_run(tmp_path / "r", worlds=(0, 1, 2),
                           noise={"baseline": 1.6, "kd": 0.9, "kd_repr": 1.0},
                           world_noise={0: {"kd_repr": 0.2}})
    r = _row(run_table(run), "kd_repr")
    assert r["worlds_agree_vs_kd"] == 1 and r["kd_verdict"] == UNRESOLVED


def test_a_run_without_per_user_files_is_refused(tmp_path):
    run = make_run(tmp_path / "plain", make_results())
    with pytest.raises(ConfigError, match="no per-user evaluation files"):
        run_table(run)


def test_worlds_add_their_spread():
    rng = np.random.default_rng(6)
    # 5 worlds of constant NE; replicates average W drawn worlds
    per_world = np.array([0.80, 0.81, 0.79, 0.83, 0.82])[:, None].repeat(4000, axis=1)
    pooled = pool_worlds(per_world, world_draws(5, 4000, rng))
    assert pooled.std() == pytest.approx(per_world[:, 0].std() / math.sqrt(5), rel=0.05)
    lo, hi = interval(pooled)
    assert 0.79 < lo < 0.81 < hi < 0.83
    # one world: the inner replicates are used as they are
    inner = rng.standard_normal((1, 50))
    assert np.array_equal(pool_worlds(inner, world_draws(1, 50, rng)), inner[0])


def test_a_world_drawn_twice_gets_independent_inner_draws():
    draws = world_draws(3, 1000, np.random.default_rng(7))
    twice = draws.world[:, 0] == draws.world[:, 1]
    assert twice.any()
    assert (draws.replicate[twice, 0] != draws.replicate[twice, 1]).mean() > 0.99
