"""``benchmarks.thin_log``'s ratings carry signal by its ordered logistic model: an item's other
ratings predict a row's label (items recur), its shares are the model's, and the log's shape
(times, users, items) is drawn before the ratings, so a rating model leaves it as it was."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu

from benchmarks.thin_log import RATING_SHARES, thin_frame

SHAPE = {"rows": 20_000, "users": 16_000, "items": 600, "years": 4.0}


def _auc(y: np.ndarray, score: np.ndarray) -> float:
    pos, neg = score[y == 1], score[y == 0]
    return float(mannwhitneyu(pos, neg).statistic) / (len(pos) * len(neg))


def _held_out_auc(frame: pd.DataFrame, key: str) -> float:
    """AUC of ``rating >= 4`` on the later half of the log scored by the key's mean label in
    the earlier half (the earlier base rate for a key not seen then)."""
    y = (frame["rating"] >= 4).to_numpy().astype(int)
    half = len(frame) // 2
    early = pd.Series(y[:half]).groupby(frame[key].to_numpy()[:half]).mean()
    score = frame[key].iloc[half:].map(early).fillna(y[:half].mean()).to_numpy()
    return _auc(y[half:], score)


def test_ratings_carry_item_signal_with_the_models_shares():
    frame = thin_frame(**SHAPE)
    shares = frame["rating"].value_counts(normalize=True).sort_index()
    assert shares.index.tolist() == [1, 2, 3, 4, 5]
    assert np.allclose(shares.to_numpy(), RATING_SHARES, atol=0.005)
    assert _held_out_auc(frame, "item") > 0.62
    # the same check on ratings drawn apart from user and item finds nothing
    shuffled = frame.assign(rating=np.random.default_rng(1).permutation(frame["rating"]))
    assert abs(_held_out_auc(shuffled, "item") - 0.5) < 0.02


def test_the_shape_is_drawn_before_the_ratings():
    a, b = thin_frame(**SHAPE), thin_frame(**SHAPE)
    pd.testing.assert_frame_equal(a, b)  # deterministic by seed
    assert a["time"].is_monotonic_increasing
    assert a["user"].nunique() == SHAPE["users"]
    assert (a["user"].value_counts() == 1).mean() > 0.7  # most users rate once
