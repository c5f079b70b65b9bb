"""Speculation policies see only the days before the day they predict, and rank as documented."""

from __future__ import annotations

import pandas as pd
import pytest

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.solaris import PastLog, build_policy, hit_rate_curve, read_log


def _log(rows):
    return pd.DataFrame(rows, columns=["day", "ts", "user_id", "item"])


LOG = _log([
    (0, 10, 1, 100), (0, 11, 1, 101), (0, 12, 2, 100),
    (1, 20, 1, 102), (1, 21, 1, 100), (1, 22, 2, 103), (1, 23, 3, 101),
])
# day 2 is "poisoned": rows that would change every pick if a policy saw them
POISON = _log([(2, 30 + j, u, 999) for j, u in enumerate([1, 1, 2, 2, 3, 3, 3])])


def test_past_log_refuses_the_day_it_predicts():
    with pytest.raises(ValueError, match="sees only days before 2"):
        PastLog(pd.concat([LOG, POISON]), 2)
    view = PastLog.before(pd.concat([LOG, POISON]), 2)
    assert view.frame["day"].max() == 1 and len(view.frame) == len(LOG)


@pytest.mark.parametrize("name", ["recent", "popular", "cooccur"])
def test_policy_picks_do_not_depend_on_day_d(name):
    policy = build_policy(name)
    clean = policy.pick(PastLog.before(LOG, 2), 2)
    poisoned = policy.pick(PastLog.before(pd.concat([LOG, POISON]), 2), 2)
    pd.testing.assert_frame_equal(clean, poisoned)
    assert 999 not in set(poisoned["item"])


def test_recent_ranks_the_latest_distinct_items():
    picks = build_policy("recent").pick(PastLog.before(LOG, 2), 2)
    got = {u: list(g.sort_values("rank")["item"]) for u, g in picks.groupby("user_id")}
    # user 1: 100 (ts 21), 102 (ts 20), then 101 (ts 11) cut by k=2
    assert got == {1: [100, 102], 2: [103, 100], 3: [101]}


def test_popular_is_the_same_top_items_for_every_user():
    picks = build_policy("popular").pick(PastLog.before(LOG, 2), 2)
    # counts before day 2: 100 ×3, 101 ×2, 102 ×1, 103 ×1
    assert set(picks["user_id"]) == {1, 2, 3}
    for _, g in picks.groupby("user_id"):
        assert list(g.sort_values("rank")["item"]) == [100, 101]
    windowed = build_policy("popular", {"window_days": 1}).pick(PastLog.before(LOG, 2), 1)
    assert set(windowed["item"]) == {100}  # day 1 alone: 100, 101, 102, 103 once; tie → 100


def test_cooccur_scores_items_by_shared_users():
    """Users who saw both (before day 2): 100·101 u1, 100·102 u1, 100·103 u2, 101·102 u1;
    100 by u1, u2; 101 by u1, u3; 102 by u1; 103 by u2."""
    picks = build_policy("cooccur").pick(PastLog.before(LOG, 2), 2)
    got = {u: list(g.sort_values("rank")["item"]) for u, g in picks.groupby("user_id")}
    # user 3 (recent 101): 101 → 2, 100 → 1, 102 → 1 (tie: the smaller id)
    # user 2 (recent 103, 100): 100 → 2 + 1, 103 → 1 + 1, 101 → 1, 102 → 1
    assert got[3] == [101, 100] and got[2] == [100, 103]
    one = build_policy("cooccur", {"history": 1, "chunk": 1}).pick(PastLog.before(LOG, 2), 4)
    u2 = list(one[one.user_id == 2].sort_values("rank")["item"])
    assert u2 == [100, 103]  # recent 103 alone: 100 and 103 score 1, 101 and 102 score 0


def test_bad_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="speculation policy"):
        build_policy("nope")
    with pytest.raises(ConfigError, match="window_days"):
        build_policy("popular", {"window_days": "x"})


def test_read_log_never_opens_day_d(tiny_data, tmp_path):
    """A copy of the tiny world whose day 3 file is garbage: the view for day 3 still reads."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    (data / "day=3" / "part-0.parquet").write_bytes(b"poison")
    log = read_log(data, range(0, 3), "ad_id")
    assert sorted(log["day"].unique()) == [0, 1, 2]
    picks = build_policy("recent").pick(PastLog.before(log, 3), 4)
    assert len(picks) and picks.groupby("user_id").size().max() <= 4
    with pytest.raises(Exception):  # noqa: B017 - the poisoned day is really unreadable
        read_log(data, [3], "ad_id")


def test_hit_rate_curve_by_hand():
    """Day 2's served rows against picks from days 0-1 (recent): counted by hand."""
    served = _log([(2, 30, 1, 100), (2, 31, 1, 100), (2, 32, 1, 101), (2, 33, 2, 100),
                   (2, 34, 3, 555)])
    curve = hit_rate_curve(pd.concat([LOG, served]), build_policy("recent"), [2], [1, 2])
    k1, k2 = curve.to_dict("records")
    # K=1 picks: (1,100), (2,103), (3,101): rows hit: (1,100) twice → 2 of 5; wasted: 2 of 3
    assert (k1["hits"], k1["served"], k1["picked"], k1["wasted"]) == (2, 5, 3, 2)
    assert k1["hit_rate"] == pytest.approx(0.4) and k1["wasted_share"] == pytest.approx(2 / 3)
    # K=2 adds (1,102), (2,100): (2,100) served once → 3 of 5; wasted (2,103),(3,101),(1,102)
    assert (k2["hits"], k2["picked"], k2["wasted"]) == (3, 5, 3)
    assert k2["hit_rate"] == pytest.approx(0.6) and k2["wasted_share"] == pytest.approx(0.6)
