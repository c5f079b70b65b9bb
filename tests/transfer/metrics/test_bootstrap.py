"""The paired user-level bootstrap: closed-form standard errors, coverage, pairing, clustering,
the seed level, and determinism (the world level: tests/benchmarks/test_percentile_rule.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gemkd.transfer.metrics.bootstrap import (
    WorldSums,
    interval,
    ne_point,
    ne_replicates,
    resample_weights,
    rng_for,
    seed_mean,
    seed_weights,
)

P = 0.3
H = -(P * math.log(P) + (1 - P) * math.log(1 - P))


def world(loss: np.ndarray, n: np.ndarray, user: np.ndarray | None = None,
          domain: np.ndarray | None = None, pos: np.ndarray | None = None,
          base_rate: float = P, n_domains: int = 1) -> WorldSums:
    """Arms ``loss [A, C]`` (one task), counts ``n [C]``."""
    c = n.shape[0]
    return WorldSums(
        user=np.arange(c) if user is None else user,
        domain=np.zeros(c, dtype=np.int64) if domain is None else domain,
        loss=loss[..., None], n=n[:, None].astype(float),
        pos=(np.floor(n * P) if pos is None else pos)[:, None].astype(float),
        base_rate=np.array([base_rate]), n_domains=n_domains)


def test_weights_draw_users_and_move_their_clusters_together():
    user = np.array([5, 5, 9, 2, 2, 2, 7])  # 4 users, clusters in several domains
    w = resample_weights(user, 2000, np.random.default_rng(0))
    assert w.shape == (2000, 7)
    assert (w[:, 0] == w[:, 1]).all() and (w[:, 3] == w[:, 5]).all()
    per_user = w[:, [0, 2, 3, 6]]
    assert (per_user.sum(axis=1) == 4).all() and (per_user == per_user.round()).all()
    assert per_user.mean() == pytest.approx(1.0, abs=0.03)  # each user drawn once on average
    assert per_user.var() == pytest.approx(3 / 4, rel=0.1)  # multinomial: (1 − 1/U)


def test_point_ne_per_domain_and_all():
    rng = np.random.default_rng(1)
    c = 50
    n = rng.integers(1, 9, c).astype(float)
    pos = np.floor(n * rng.random(c))
    loss = rng.random((2, c)) * n
    dom = rng.integers(0, 2, c)
    w = world(loss, n, domain=dom, pos=pos, base_rate=math.nan, n_domains=2)
    ne = ne_point(w)  # [A, G, T]
    for g, rows in ((0, dom == 0), (1, dom == 1), (2, np.ones(c, bool))):
        p = pos[rows].sum() / n[rows].sum()  # no training base rate: the cell's own mean
        h = -(p * math.log(p) + (1 - p) * math.log(1 - p))
        assert ne[:, g, 0] == pytest.approx(loss[:, rows].sum(1) / n[rows].sum() / h, rel=1e-12)
    fixed = ne_point(world(loss, n, domain=dom, pos=pos, n_domains=2))
    assert fixed[:, 2, 0] == pytest.approx(loss.sum(1) / n.sum() / H, rel=1e-12)


def test_bootstrap_std_matches_the_analytic_standard_error():
    """Equal clusters with i.i.d. means: NE = mean of cluster means / H, SE = σ / √U / H."""
    rng = np.random.default_rng(2)
    users, size, sigma = 2000, 10, 0.3
    means = 0.6 + sigma * rng.standard_normal(users)
    w = world((means * size)[None], np.full(users, size))
    reps = ne_replicates(w, 4000, rng_for(0, 1))[:, 0, 1, 0]
    assert reps.std() == pytest.approx(means.std() / math.sqrt(users) / H, rel=0.04)
    assert reps.std() == pytest.approx(sigma / math.sqrt(users) / H, rel=0.06)
    assert reps.mean() == pytest.approx(means.mean() / H, abs=reps.std() / 10)


def test_coverage_of_the_95_interval():
    """Datasets drawn from a known skewed distribution: the interval holds the true NE ~95 %."""
    rng = np.random.default_rng(3)
    users, size, truth = 150, 8, 0.6 / H  # cluster means ~ Gamma(2, 0.3): mean 0.6
    hits = []
    for k in range(400):
        means = rng.gamma(2.0, 0.3, users)
        reps = ne_replicates(world((means * size)[None], np.full(users, size)), 600,
                             rng_for(k, 1))[:, 0, 1, 0]
        lo, hi = interval(reps)
        hits.append(lo <= truth <= hi)
    assert 0.915 <= np.mean(hits) <= 0.975


def test_pairing_cancels_what_every_user_shares():
    """Two arms that differ by a constant per example: ΔNE's interval has zero width, though
    each arm's own interval does not."""
    rng = np.random.default_rng(4)
    c = 300
    n = rng.integers(1, 20, c).astype(float)
    base = rng.gamma(2.0, 0.3, c) * n
    w = world(np.stack([base, base + 0.05 * n]), n, user=rng.integers(0, 120, c),
              domain=rng.integers(0, 3, c), n_domains=3)
    reps = ne_replicates(w, 500, rng_for(0, 1))
    delta = reps[:, 1] - reps[:, 0]  # [B, G, T]
    lo, hi = interval(delta)
    assert np.allclose(lo, 0.05 / H, atol=1e-12) and np.allclose(hi, 0.05 / H, atol=1e-12)
    own_lo, own_hi = interval(reps[:, 0])
    assert (own_hi - own_lo > 0.01).all()


def test_correlated_users_widen_the_interval():
    """Impressions that share a strong user effect: resampling users is ~√(1 + (m − 1)ρ)
    wider than resampling impressions as if independent."""
    rng = np.random.default_rng(5)
    users, m = 300, 20
    effect = np.repeat(rng.gamma(2.0, 0.3, users), m)
    loss = effect + 0.05 * rng.standard_normal(users * m)
    n = np.ones(users * m)
    by_user = ne_replicates(world(loss[None], n, user=np.repeat(np.arange(users), m)), 1000,
                            rng_for(0, 1))[:, 0, 1, 0]
    by_example = ne_replicates(world(loss[None], n), 1000, rng_for(0, 1))[:, 0, 1, 0]
    assert by_user.std() > 3 * by_example.std()


def test_seeds_add_their_spread():
    rng = np.random.default_rng(6)
    # seed level: per-seed values without user noise; the mean over drawn seeds
    values = np.array([1.0, 2.0, 6.0])[None, :].repeat(4000, axis=0)  # [B, S]
    means = seed_mean(values, seed_weights(3, 4000, rng))
    assert means.mean() == pytest.approx(3.0, abs=0.05)
    assert means.std() == pytest.approx(np.std([1, 2, 6]) / math.sqrt(3), rel=0.05)
    # a missing seed is left out, not counted as 0
    gaps = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    assert seed_mean(gaps, np.ones((2, 3))).tolist()[0] == 2.0
    assert np.isnan(seed_mean(gaps, np.ones((2, 3)))[1])


def test_interval_percentiles_and_undefined_replicates():
    x = np.arange(1001, dtype=float)
    lo, hi = interval(x)
    assert (float(lo), float(hi)) == pytest.approx((25.0, 975.0))
    few = x.copy()
    few[:20] = np.nan  # 2 %: left out
    assert np.isfinite(interval(few)[0])
    many = x.copy()
    many[:40] = np.inf  # 4 %: the tail is unknown
    assert np.isnan(interval(many)[0]) and np.isnan(interval(many)[1])
    cols = np.stack([x, np.full_like(x, np.nan)], axis=1)
    lo, hi = interval(cols)
    assert lo[0] == pytest.approx(25.0) and np.isnan(lo[1])


def test_same_seed_same_replicates():
    rng = np.random.default_rng(8)
    c = 200
    n = rng.integers(1, 9, c).astype(float)
    w = world(rng.random((2, c)) * n, n, user=rng.integers(0, 80, c))
    a = ne_replicates(w, 300, rng_for(3, 1, 7))
    b = ne_replicates(w, 300, rng_for(3, 1, 7))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, ne_replicates(w, 300, rng_for(4, 1, 7)))
    assert not np.array_equal(a, ne_replicates(w, 300, rng_for(3, 1, 8)))


def test_replicate_blocks_do_not_change_the_draws(monkeypatch):
    """Replicates drawn in memory-bounded blocks equal those drawn at once."""
    import gemkd.transfer.metrics.bootstrap as bootstrap

    rng = np.random.default_rng(9)
    n = rng.integers(1, 9, 64).astype(float)
    w = world(rng.random((1, 64)) * n, n, user=rng.integers(0, 30, 64))
    whole = ne_replicates(w, 100, rng_for(0, 1))
    monkeypatch.setattr(bootstrap, "_BLOCK", 64 * 7)  # 7 replicates per block
    assert np.allclose(ne_replicates(w, 100, rng_for(0, 1)), whole, rtol=0, atol=1e-15)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="n and pos"):
        WorldSums(np.arange(3), np.zeros(3, int), np.zeros((1, 3, 2)), np.zeros((3, 1)),
                  np.zeros((3, 2)), np.zeros(2), 1)
    with pytest.raises(ValueError, match="domain ids"):
        WorldSums(np.arange(3), np.array([0, 1, 2]), np.zeros((1, 3, 1)), np.zeros((3, 1)),
                  np.zeros((3, 1)), np.zeros(1), 2)
