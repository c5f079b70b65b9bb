"""Hit rate and waste of a speculation policy, as pure bookkeeping over a log (no teacher).

For day d with the policy's top-K picks P_K (from the log before d) and the day's served rows
S (every impression of the day, or of the student's domain):

    hit rate     = |{s in S : (user_s, item_s) in P_K}| / |S|      (rows, repeats counted)
    wasted share = |{p in P_K : p served on no row of S}| / |P_K|   (pairs)

A policy's picks are prefix-consistent (rank < K' is its K' pick), so one pick at the largest K
gives every smaller K's point of the curve.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from gemkd.transfer.solaris.policy import PastLog, SpeculationPolicy, check_picks


def day_measures(picks: pd.DataFrame, served: pd.DataFrame, ks: Iterable[int]
                 ) -> list[dict]:
    """One record per K of ``ks``: ``k, served, picked, hits, hit_rate, wasted, wasted_share``.
    ``picks``: ``user_id, item, rank``; ``served``: the day's rows (``user_id, item``). An empty
    denominator gives NaN (no rows served, or nothing picked)."""
    s = pd.MultiIndex.from_arrays([served["user_id"].to_numpy(np.int64),
                                   served["item"].to_numpy(np.int64)])
    served_pairs = s.unique()
    out = []
    for k in sorted(set(ks)):
        p = picks[picks["rank"] < k]
        pk = pd.MultiIndex.from_arrays([p["user_id"].to_numpy(np.int64),
                                        p["item"].to_numpy(np.int64)])
        hits = int(s.isin(pk).sum())
        wasted = int((~pk.isin(served_pairs)).sum())
        out.append({"k": int(k), "served": len(s), "picked": len(pk), "hits": hits,
                    "hit_rate": hits / len(s) if len(s) else float("nan"),
                    "wasted": wasted,
                    "wasted_share": wasted / len(pk) if len(pk) else float("nan")})
    return out


def hit_rate_curve(log: pd.DataFrame, policy: SpeculationPolicy, days: Iterable[int],
                   ks: Iterable[int], served: pd.DataFrame | None = None) -> pd.DataFrame:
    """The curve of hit rate and wasted share against K, per day of ``days``: ``log``
    (``day, ts, user_id, item``) is what the policy learns from (each day sees only
    :meth:`PastLog.before` it), ``served`` (default ``log``) the rows the days serve (e.g. only
    the student's domain). Columns: ``day`` then :func:`day_measures`' keys."""
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive integers, got {ks}")
    served = log if served is None else served
    rows = []
    for d in days:
        picks = check_picks(policy.pick(PastLog.before(log, d), ks[-1]), ks[-1],
                            f"policy {type(policy).__name__} on day {d}")
        today = served[served["day"] == d]
        rows += [{"day": int(d), **m} for m in day_measures(picks, today, ks)]
    return pd.DataFrame(rows)
