"""Holm's step-down procedure against hand-computed families, and the level of the interval
that agrees with each decision (gemkd.transfer.metrics.holm)."""

from __future__ import annotations

import numpy as np
import pytest

from gemkd.transfer.metrics.holm import holm


def test_a_four_test_family_by_hand():
    # sorted: 0.005 ≤ .05/4, 0.01 ≤ .05/3, then 0.03 > .05/2: Holm stops at rank 3
    h = holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    assert h.reject.tolist() == [True, False, False, True]
    assert h.rank.tolist() == [2, 4, 3, 1]
    # adjusted: running max of (4·.005, 3·.01, 2·.03, 1·.04) = (.02, .03, .06, .06)
    np.testing.assert_allclose(h.adjusted, [0.03, 0.06, 0.06, 0.02])
    # rejected at their own step; from the stop on, the stopping step's level
    np.testing.assert_allclose(h.alpha, [0.05 / 3, 0.05 / 2, 0.05 / 2, 0.05 / 4])


def test_intervals_after_the_stop_use_the_stopping_step_s_level():
    """p = 0.03, 0.04: Holm rejects neither (0.03 > 0.025); the second's interval at its own
    step (α/1) would exclude 0 beside a 'not resolved' verdict."""
    h = holm([0.03, 0.04])
    assert not h.reject.any()
    np.testing.assert_allclose(h.alpha, [0.025, 0.025])
    assert (np.array([0.03, 0.04]) > h.alpha).all()  # each interval holds 0
    np.testing.assert_allclose(h.adjusted, [0.06, 0.06])


def test_every_test_rejected_and_bonferroni_is_weaker():
    h = holm([0.04, 0.001])
    assert h.reject.all()
    np.testing.assert_allclose(h.alpha, [0.05, 0.025])
    np.testing.assert_allclose(h.adjusted, [0.04, 0.002])
    assert not 0.04 <= 0.05 / 2  # Bonferroni would not reject the first


def test_a_missing_p_value_counts_in_the_family_and_is_never_rejected():
    h = holm([np.nan, 0.001, 0.2])
    assert h.reject.tolist() == [False, True, False]
    assert h.rank.tolist() == [3, 1, 2]
    np.testing.assert_allclose(h.alpha, [0.025, 0.05 / 3, 0.025])
    assert np.isnan(h.adjusted[0]) and h.adjusted[1] == pytest.approx(0.003)
    assert h.adjusted[2] == pytest.approx(0.4)


def test_adjusted_p_values_reject_exactly_where_holm_does():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.uniform(0, 0.1, rng.integers(1, 9))
        h = holm(p, 0.05)
        assert (h.reject == (h.adjusted <= 0.05)).all()
        assert ((p <= h.alpha) == h.reject).all()  # the interval agrees with the decision
        assert (h.adjusted >= p).all() and (h.adjusted <= 1).all()


def test_one_test_is_the_unadjusted_test_and_the_empty_family_is_empty():
    h = holm([0.04])
    assert h.reject.tolist() == [True] and h.alpha.tolist() == [0.05]
    assert h.adjusted.tolist() == [0.04]
    assert holm([]).reject.size == 0
    with pytest.raises(ValueError, match="alpha must be in"):
        holm([0.1], alpha=1.5)
