"""The MDE, the variance split and the design predictions of gemkd.transfer.metrics.power."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

from gemkd.transfer.metrics.contrasts import Units, covariance, difference
from gemkd.transfer.metrics.power import (
    Components,
    c4,
    detectable,
    mean_critical,
    power,
    predict,
    run_components,
    world_components,
)


def test_normal_mde_is_z_plus_z():
    want = stats.norm.isf(0.025) + stats.norm.isf(0.2)
    assert detectable(1.0, math.inf) == pytest.approx(want, abs=1e-4)
    assert detectable(1.0, 5.0) == pytest.approx(want, abs=1e-4)  # users known: normal


@pytest.mark.parametrize("df", [2, 4, 9, 29])
def test_t_power_is_the_noncentral_t(df):
    crit = stats.t.isf(0.025, df)
    exact = brentq(lambda d: stats.nct.sf(crit, df, d) - 0.8, 0, 30)
    assert detectable(0.0, df) == pytest.approx(exact, rel=1e-3)
    assert power(exact, 0.0, df) == pytest.approx(0.8, abs=2e-3)
    # the shifted-t shortcut t_{α/2} + t_β is 5 % short at 2 df and converges at many
    shortcut = crit + stats.t.isf(0.2, df)
    assert detectable(0.0, df) == pytest.approx(shortcut, rel=0.06 if df == 2 else 0.015)


def test_pivot_power_lies_between_t_and_normal_and_falls_with_share():
    values = [detectable(u, 2) for u in (0.0, 0.3, 0.7, 1.0)]
    assert values == sorted(values, reverse=True)
    assert values[0] == pytest.approx(detectable(0.0, 2))
    assert 2.80 < values[2] < values[0]


def test_power_is_level_at_zero_and_rises():
    for share, df in ((0.0, 2), (1.0, math.inf)):
        assert power(0.0, share, df) == pytest.approx(0.05, abs=0.003)
    # the pivot is conservative where users and seeds are alike (DESIGN §6)
    assert 0.02 < power(0.0, 0.5, 2) < 0.05
    assert power(1.0, 0.5, 4) < power(2.0, 0.5, 4) < power(4.0, 0.5, 4)


def test_holm_level_needs_a_larger_effect():
    assert detectable(0.5, 9, alpha=0.05 / 6) > detectable(0.5, 9, alpha=0.05)
    with pytest.raises(ValueError, match="alpha and power"):
        detectable(0.5, 9, alpha=0.0)


def test_expected_half_width_of_t_is_t_c4():
    assert mean_critical(0.0, 2) == pytest.approx(stats.t.isf(0.025, 2) * c4(3), rel=1e-3)
    assert mean_critical(1.0, 2) == pytest.approx(stats.norm.isf(0.025))


def _one_world(rng, seeds=4, users=400, samples=400, va=1e-4, vb=4e-5, ve=9e-5):
    """Per-seed values of one contrast whose user effects are real per-user means: ``a`` shared
    by the seeds, ``b_s`` per seed, with the users resampled; ``e_s`` the seed's own shift."""
    a = rng.normal(0, math.sqrt(va * users), users)
    b = rng.normal(0, math.sqrt(vb * users), (seeds, users))
    e = rng.normal(0, math.sqrt(ve), seeds)
    per_user = a[None] + b  # [S, U]
    values = per_user.mean(axis=1) + e
    idx = rng.integers(0, users, (samples, users))
    reps = per_user[:, idx].mean(axis=2).T + e[None]  # [B, S]
    return Units(values[:, None], reps[:, :, None], users)


def test_world_components_add_up_to_the_pivot_variance():
    rng = np.random.default_rng(3)
    units = _one_world(rng)
    va, vb, ve, s2 = world_components(units)
    parts = covariance(units, units)
    # V_a is the pivot's known part; V_b + V_e the between-seed variance (none clipped here)
    assert va[0] == pytest.approx(max(parts.comps[0][0], 0.0))
    if vb[0] > 0 and ve[0] > 0:
        assert vb[0] + ve[0] == pytest.approx(s2[0])
    assert s2[0] == pytest.approx(parts.comps[1][0] * 4)


def test_components_recover_known_variances_on_average():
    rng = np.random.default_rng(7)
    got = np.array([world_components(_one_world(rng, seeds=6, samples=200))[:3]
                    for _ in range(100)])[..., 0]
    mean = got.mean(axis=0)
    assert mean[0] == pytest.approx(1e-4, rel=0.15)
    assert mean[1] == pytest.approx(4e-5, rel=0.2)
    assert mean[2] == pytest.approx(9e-5, rel=0.25)


def test_one_seed_has_no_seed_variance():
    rng = np.random.default_rng(1)
    units = _one_world(rng, seeds=1)
    va, vb, ve, s2 = world_components(units)
    assert va[0] > 0 and vb[0] == 0 and np.isnan(ve[0]) and np.isnan(s2[0])


def test_worlds_component_is_the_spread_beyond_the_worlds_own_noise():
    rng = np.random.default_rng(5)
    worlds = [_one_world(rng) for _ in range(6)]
    shift = np.array([0.03, -0.03, 0.02, -0.02, 0.01, -0.01])
    shifted = [Units(u.values + s, u.replicates + s, u.n_users) for u, s in zip(worlds, shift,
                                                                                strict=True)]
    plain, moved = run_components(worlds), run_components(shifted)
    assert plain["n_worlds"][0] == 6
    means = np.array([u.values.mean() for u in shifted])
    own = np.mean([world_components(u)[0][0] + world_components(u)[3][0] / 4 for u in shifted])
    assert moved["worlds"][0] == pytest.approx(max(means.var(ddof=1) - own, 0.0))
    assert moved["worlds"][0] > plain["worlds"][0] + 1e-4
    # the users' and seeds' parts do not see a world's shift
    assert moved["users_shared"][0] == pytest.approx(plain["users_shared"][0])


def test_split_and_prediction_at_the_run_size_agree_with_the_interval():
    rng = np.random.default_rng(11)
    units = _one_world(rng, seeds=5)
    c = run_components([units])
    comp = Components(float(c["users_shared"][0]), float(c["users_seed"][0]),
                      float(c["seeds"][0]), float(c["worlds"][0]), 1, 5.0, 400)
    split = c_split = comp.split()
    assert math.isnan(c_split["worlds"])
    est = difference(np.zeros(1), units)
    assert split["users"] + split["seeds"] == pytest.approx(est.se[0] ** 2, rel=1e-9)
    pred = predict(comp, 1, 5)
    assert pred.se == pytest.approx(est.se[0], rel=1e-9)
    assert pred.method == "pivot-seeds"


def test_prediction_scales_each_component():
    c = Components(1e-5, 2e-5, 4e-5, 3e-5, 3, 3.0, 1000)
    base = predict(c, 3, 3)
    assert base.se ** 2 == pytest.approx((3e-5 + 1e-5 + (2e-5 + 4e-5) / 3) / 3)
    more_seeds = predict(c, 3, 12)
    assert more_seeds.se ** 2 == pytest.approx((3e-5 + 1e-5 + (2e-5 + 4e-5) / 12) / 3)
    more_users = predict(c, 3, 3, users=4.0)
    assert more_users.se ** 2 == pytest.approx((3e-5 + 1e-5 / 4 + (2e-5 / 4 + 4e-5) / 3) / 3)
    more_worlds = predict(c, 12, 3)
    assert more_worlds.se == pytest.approx(base.se / 2)
    assert more_worlds.mde < base.mde / 2  # and more df: t_11 instead of t_2


def test_one_world_to_several_assumes_no_world_effect_and_says_so():
    c = Components(1e-5, 2e-5, 4e-5, math.nan, 1, 3.0, 1000)
    assert not predict(c, 1, 10).assumes_no_world_effect
    several = predict(c, 4, 3)
    assert several.assumes_no_world_effect and several.method == "t-worlds"
    one_seed = predict(c, 1, 1)
    assert one_seed.method == "users-only"
    with pytest.raises(ValueError, match="worlds and seeds"):
        predict(c, 0, 3)
