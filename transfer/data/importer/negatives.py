"""Sampled negatives for positive-only logs (clicks or plays without the unclicked impressions).

For each logged row of user u at time t, ``per_positive`` items are drawn that u had not engaged
with up to and including t, from the items seen in the log up to t — uniformly, or weighted by
their rows strictly before t (popularity) — so a negative never reveals an item or a count from
the future. Draws are distinct within a row when the user has that many items to draw from, and
repeat otherwise, so every row that has any candidate gets exactly ``per_positive`` negatives
(the base rate a model learns stays 1 / (1 + per_positive)).

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


@dataclass
class Log:
    """The logged rows in time order, with users and items as dense codes.

    Items are numbered in order of first appearance, so the catalogue up to a time is a prefix
    ``0..catalogue[i]-1``; ``before[i]`` is the number of rows strictly before row i's time.
    """

    user: np.ndarray
    item: np.ndarray
    t: np.ndarray
    n_items: int
    catalogue: np.ndarray
    before: np.ndarray
    pair_keys: np.ndarray   # sorted user * n_items + item of every engaged pair ...
    pair_first: np.ndarray  # ... and the time of its first row

    @classmethod
    def build(cls, user: np.ndarray | pd.Series, item: np.ndarray | pd.Series, t: np.ndarray
              ) -> Log:
        u = pd.factorize(user)[0].astype(np.int64)
        x = pd.factorize(item)[0].astype(np.int64)  # first-appearance order: rows are in time
        n, n_items = len(t), int(x.max()) + 1
        new_t = np.r_[True, t[1:] != t[:-1]]
        group = np.cumsum(new_t) - 1
        starts = np.flatnonzero(new_t)
        ends = np.r_[starts[1:], n]
        catalogue = np.maximum.accumulate(x)[ends[group] - 1] + 1
        keys, first = np.unique(u * n_items + x, return_index=True)
        return cls(u, x, t, n_items, catalogue, starts[group], keys, t[first])

    def engaged(self, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Whether row's user had a row with ``items`` at or before the row's time."""
        k = self.user[rows] * self.n_items + items
        j = np.minimum(np.searchsorted(self.pair_keys, k), len(self.pair_keys) - 1)
        return (self.pair_keys[j] == k) & (self.pair_first[j] <= self.t[rows])

    def first_rows(self) -> np.ndarray:
        """The first row of each item (its features are read from there)."""
        return np.unique(self.item, return_index=True)[1]


def sample(log: Log, spec: Negatives) -> np.ndarray:
    """``[n, per_positive]`` item codes of the negatives of each row; -1 where a row has none
    (every item seen by then was one its user had engaged with)."""
    rng = np.random.default_rng(spec.seed)
    popularity = spec.from_ == "popularity"
    drawn = np.full((len(log.t), spec.per_positive), -1, dtype=np.int64)
    rows, slots = np.nonzero(drawn < 0)
    for _ in range(ROUNDS):
        if len(rows) == 0:
            return drawn
        cand = _candidates(log, rows, popularity, rng)
        ok = ~log.engaged(rows, cand)
        drawn[rows[ok], slots[ok]] = cand[ok]
        touched = np.unique(rows)
        _drop_repeats(drawn, touched)
        r, slots = np.nonzero(drawn[touched] < 0)
        rows = touched[r]
    _finish(log, drawn, np.unique(rows), popularity, rng)
    return drawn


def _candidates(log: Log, rows: np.ndarray, popularity: bool, rng: np.random.Generator
                ) -> np.ndarray:
    """One candidate per pending draw: uniform over the catalogue up to the row's time, or
    the item of a uniformly drawn earlier row (popularity; uniform while there is none)."""
    r = rng.random(len(rows))
    cat = log.catalogue[rows]
    if not popularity:
        return np.minimum((r * cat).astype(np.int64), cat - 1)
    prior = log.before[rows]
    high = np.where(prior > 0, prior, cat)
    idx = np.minimum((r * high).astype(np.int64), high - 1)
    return np.where(prior > 0, log.item[idx], idx)


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


def _finish(log: Log, drawn: np.ndarray, rows: np.ndarray, popularity: bool,
            rng: np.random.Generator) -> None:
    """Fill the pending draws of ``rows`` (ascending) exactly, keeping item counts of the rows
    before each one's time as the loop moves forward in time."""
    counts = np.zeros(log.n_items, dtype=np.int64)
    done = 0
    for i in rows:
        np.add.at(counts, log.item[done:log.before[i]], 1)
        done = max(done, int(log.before[i]))
        pool = _allowed(log, i)
        weights = counts[pool] if popularity else np.ones(len(pool))
        _fill(drawn[i], pool, weights, rng)


def _allowed(log: Log, i: int) -> np.ndarray:
    """The items row ``i`` may draw: seen by its time, not engaged by its user by then."""
    allowed = np.ones(int(log.catalogue[i]), dtype=bool)
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
