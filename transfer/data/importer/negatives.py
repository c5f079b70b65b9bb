"""Sampled negatives for positive-only logs (clicks or plays without the unclicked impressions).

For each logged row of user u at time t, ``per_positive`` items are drawn that u had not engaged
with up to and including t, from the items *available* at t: every item first logged by
t + ``lookahead_hours``. The look-ahead is item availability only: an item first logged soon
after t already existed at t (a news article is published before its first click), and without
it a brand-new item could never be a negative, so item novelty alone would tell positives from
negatives. Nothing else from after t is used: no row, count or label of a later time.

``uniform`` draws every available item equally; ``popularity`` weights an item by its rows in the
``window_hours`` strictly before t (None: since the log's start), and an item first logged in
[t, t + lookahead] — new, with no earlier row — by one row; a row with neither draws uniformly.
Draws are distinct within a row when the user has that many items to draw from, and repeat
otherwise, so every row that has any candidate gets exactly ``per_positive`` negatives (the base
rate a model learns stays 1 / (1 + per_positive)).

Sampling is vectorised rejection: every pending draw picks a candidate at once and is kept if
it is allowed; rows still short after ``ROUNDS`` rounds (tiny pools, users who engaged with most
of the popular items) are finished exactly, one row at a time, in time order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gemkd.transfer.data.importer.mapping import Negatives

ROUNDS = 64


HOUR_NS = 3600 * 10**9


@dataclass
class Log:
    """The logged rows in time order (``t`` in nanoseconds), with users and items as dense codes.

    Items are numbered in order of first appearance, so the items first logged by a time are a
    prefix ``0..k-1`` of the codes; ``first_t[x]`` is item x's first time and ``before[i]`` the
    number of rows strictly before row i's time.
    """

    user: np.ndarray
    item: np.ndarray
    t: np.ndarray
    n_items: int
    first_t: np.ndarray
    before: np.ndarray
    pair_keys: np.ndarray   # sorted user * n_items + item of every engaged pair ...
    pair_first: np.ndarray  # ... and the time of its first row

    @classmethod
    def build(cls, user: np.ndarray | pd.Series, item: np.ndarray | pd.Series, t: np.ndarray
              ) -> Log:
        u = pd.factorize(user)[0].astype(np.int64)
        x = pd.factorize(item)[0].astype(np.int64)  # first-appearance order: rows are in time
        n_items = int(x.max()) + 1
        first_t = t[np.unique(x, return_index=True)[1]]
        before = np.searchsorted(t, t, side="left")
        keys, first = np.unique(u * n_items + x, return_index=True)
        return cls(u, x, t, n_items, first_t, before, keys, t[first])

    def engaged(self, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Whether row's user had a row with ``items`` at or before the row's time."""
        k = self.user[rows] * self.n_items + items
        j = np.minimum(np.searchsorted(self.pair_keys, k), len(self.pair_keys) - 1)
        return (self.pair_keys[j] == k) & (self.pair_first[j] <= self.t[rows])

    def first_rows(self) -> np.ndarray:
        """The first row of each item (its features are read from there)."""
        return np.unique(self.item, return_index=True)[1]


@dataclass
class Pools:
    """What each row may draw from: items ``0..available-1`` (first logged by t + look-ahead);
    popularity's rows ``past_lo..before-1`` (the window before t) and its new items
    ``new_lo..available-1`` (first logged in [t, t + look-ahead], one row's weight each)."""

    available: np.ndarray
    new_lo: np.ndarray
    past_lo: np.ndarray

    @classmethod
    def of(cls, log: Log, spec: Negatives) -> Pools:
        ahead = int(round(spec.lookahead_hours * HOUR_NS))
        available = np.searchsorted(log.first_t, log.t + ahead, side="right")
        new_lo = np.searchsorted(log.first_t, log.t, side="left")
        if spec.window_hours is None or spec.from_ != "popularity":
            past_lo = np.zeros(len(log.t), dtype=np.int64)
        else:
            window = int(round(spec.window_hours * HOUR_NS))
            past_lo = np.searchsorted(log.t, log.t - window, side="left")
        return cls(available, new_lo, past_lo)


def item_age(log: Log, drawn: np.ndarray, hours: float) -> dict[str, float]:
    """The share of logged rows (positives) and of sampled negatives on items first logged
    under ``hours`` before the row (a negative first logged after its row counts as new)."""
    limit = hours * HOUR_NS
    pos = (log.t - log.first_t[log.item]) < limit
    have = drawn >= 0
    rows = np.broadcast_to(np.arange(len(drawn))[:, None], drawn.shape)[have]
    neg = (log.t[rows] - log.first_t[drawn[have]]) < limit
    return {"hours": float(hours), "positives": float(pos.mean()) if len(pos) else 0.0,
            "negatives": float(neg.mean()) if len(neg) else 0.0}


def sample(log: Log, spec: Negatives) -> np.ndarray:
    """``[n, per_positive]`` item codes of the negatives of each row; -1 where a row has none
    (every item available by then was one its user had engaged with)."""
    rng = np.random.default_rng(spec.seed)
    popularity = spec.from_ == "popularity"
    pools = Pools.of(log, spec)
    drawn = np.full((len(log.t), spec.per_positive), -1, dtype=np.int64)
    rows, slots = np.nonzero(drawn < 0)
    for _ in range(ROUNDS):
        if len(rows) == 0:
            return drawn
        cand = _candidates(log, pools, rows, popularity, rng)
        ok = ~log.engaged(rows, cand)
        drawn[rows[ok], slots[ok]] = cand[ok]
        touched = np.unique(rows)
        _drop_repeats(drawn, touched)
        r, slots = np.nonzero(drawn[touched] < 0)
        rows = touched[r]
    _finish(log, pools, drawn, np.unique(rows), popularity, rng)
    return drawn


def _candidates(log: Log, pools: Pools, rows: np.ndarray, popularity: bool,
                rng: np.random.Generator) -> np.ndarray:
    """One candidate per pending draw: uniform over the items available at the row's time, or
    (popularity) an entry of the row's pool: the item of a row in the window before it, or a new
    item (uniform while the pool is empty)."""
    r = rng.random(len(rows))
    cat = pools.available[rows]
    uniform = np.minimum((r * cat).astype(np.int64), cat - 1)
    if not popularity:
        return uniform
    past_lo, before, new_lo = pools.past_lo[rows], log.before[rows], pools.new_lo[rows]
    past = before - past_lo
    size = past + (cat - new_lo)
    k = np.minimum((r * size).astype(np.int64), np.maximum(size - 1, 0))
    from_past = log.item[np.minimum(past_lo + k, len(log.item) - 1)]
    picked = np.where(k < past, from_past, new_lo + k - past)
    return np.where(size > 0, picked, uniform)


def _drop_repeats(drawn: np.ndarray, rows: np.ndarray) -> None:
    """Reset every repeated item within the given rows (one copy stays) to -1 (pending)."""
    if len(rows) == 0 or drawn.shape[1] == 1:
        return
    sub = drawn[rows]
    order = np.argsort(sub, axis=1, kind="stable")
    s = np.take_along_axis(sub, order, axis=1)
    dup = (s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)
    r, c = np.nonzero(dup)
    drawn[rows[r], order[:, 1:][r, c]] = -1


def _finish(log: Log, pools: Pools, drawn: np.ndarray, rows: np.ndarray, popularity: bool,
            rng: np.random.Generator) -> None:
    """Fill the pending draws of ``rows`` (ascending) exactly, keeping item counts of the rows
    in each one's window as the loop moves forward in time."""
    counts = np.zeros(log.n_items, dtype=np.int64)  # the item counts of rows [start, end)
    start = end = 0
    for i in rows:
        lo, hi = int(pools.past_lo[i]), int(log.before[i])  # both never decrease
        np.subtract.at(counts, log.item[start:min(lo, end)], 1)
        start, end = lo, max(end, lo)
        np.add.at(counts, log.item[end:hi], 1)
        end = hi
        pool = _allowed(log, pools, i)
        if popularity:
            weights = counts[pool] + (pool >= pools.new_lo[i])
        else:
            weights = np.ones(len(pool))
        _fill(drawn[i], pool, weights, rng)


def _allowed(log: Log, pools: Pools, i: int) -> np.ndarray:
    """The items row ``i`` may draw: available by its time, not engaged by its user by then."""
    allowed = np.ones(int(pools.available[i]), dtype=bool)
    u = log.user[i] * log.n_items
    lo, hi = np.searchsorted(log.pair_keys, [u, u + log.n_items])
    mine = log.pair_keys[lo:hi][log.pair_first[lo:hi] <= log.t[i]] - u
    allowed[mine[mine < len(allowed)]] = False
    return np.flatnonzero(allowed)


def _fill(out: np.ndarray, pool: np.ndarray, weights: np.ndarray,
          rng: np.random.Generator) -> None:
    """Draw ``out``'s pending entries (< 0) from ``pool`` by ``weights``: distinct from each
    other and from the entries drawn before when the pool is large enough, else with repeats;
    uniform when too few items have a weight. An empty pool leaves the row without any."""
    if len(pool) == 0:
        out[:] = -1
        return
    pending = out < 0
    distinct = len(pool) >= len(out)
    if distinct:
        keep = ~np.isin(pool, out[~pending])
        pool, weights = pool[keep], weights[keep]
    if np.count_nonzero(weights) < (int(pending.sum()) if distinct else 1):
        weights = np.ones(len(pool))
    out[pending] = rng.choice(pool, size=int(pending.sum()), replace=not distinct,
                              p=weights / weights.sum())


def expand_index(drawn: np.ndarray, first_rows: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where every output row comes from: ``src`` (the logged row it copies), ``item_src`` (the
    row its item and item features are read from) and ``sampled`` (1 on a negative). Each
    positive is followed by its negatives, so time order is kept."""
    have = drawn >= 0
    counts = have.sum(axis=1)
    src = np.repeat(np.arange(len(drawn)), 1 + counts)
    starts = np.cumsum(1 + counts) - (1 + counts)
    sampled = np.ones(len(src), dtype=np.int8)
    sampled[starts] = 0
    item_src = src.copy()
    item_src[sampled == 1] = first_rows[drawn[have]]
    return src, item_src, sampled
