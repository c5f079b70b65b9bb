"""Users' engagement timelines: organic views/likes and ad clicks/conversions, over time.

The background events (pre-history and data days) are drawn at once, as the seed's stream has
always drawn them, and kept in (day, user, time) order (``Background``); a ``Timeline`` holds only
what the next impressions can see: each user's last ``max_history`` events, sorted by ``(user,
time)`` in one int64 key, joined by a merge as days go by (no re-sort of the whole timeline), so
the history of any number of impressions is two ``searchsorted`` calls and one gather.
Times are seconds since the start of the pre-history (day ``-history_days``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemkd.transfer.data.ranges import age_buckets, gather_ranges, last_per_user, merge_at
from gemkd.transfer.data.synth.world import World

DAY = 86_400
ACTION_VIEW, ACTION_LIKE, ACTION_CLICK, ACTION_CONVERSION = 0, 1, 2, 3
N_ACTIONS = 4
INTEREST_TEMPERATURE = 4.0


@dataclass
class Timeline:
    """Events sorted by ``(user, time)``, ties in the order they were added."""

    key: np.ndarray  # user << 32 | t, sorted
    item: np.ndarray  # int64: ad id, or n_ads_total + content id
    category: np.ndarray  # int32 topic
    action: np.ndarray  # int32

    @classmethod
    def empty(cls) -> Timeline:
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int32),
                   np.empty(0, np.int32))

    def add(self, users: np.ndarray, t: np.ndarray, item: np.ndarray, category: np.ndarray,
            action: np.ndarray) -> None:
        """Merge events in, each after the events already held at the same (user, time) and
        equal ones in the order given: the order of a stable sort of all of them, without it."""
        key = _key(users, t)
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        where = (np.arange(len(self.key)) + np.searchsorted(sorted_key, self.key, side="left"),
                 np.arange(len(key)) + np.searchsorted(self.key, sorted_key, side="right"),
                 order)
        del sorted_key
        self.key = merge_at(self.key, key, where)
        self.item = merge_at(self.item, item.astype(np.int64), where)
        self.category = merge_at(self.category, category.astype(np.int32), where)
        self.action = merge_at(self.action, action.astype(np.int32), where)

    def keep_last(self, max_events: int) -> None:
        """Keep each user's last ``max_events`` events: all a later impression's history reads."""
        keep = last_per_user(self.key >> 32, max_events)
        self.key, self.item = self.key[keep], self.item[keep]
        self.category, self.action = self.category[keep], self.action[keep]

    def histories(self, users: np.ndarray, t: np.ndarray, max_history: int
                  ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The most recent ``max_history`` events strictly before ``t``, oldest first."""
        end = np.searchsorted(self.key, _key(users, t), side="left")
        first = np.searchsorted(self.key, _key(users, np.zeros_like(t)), side="left")
        start = np.maximum(first, end - max_history)
        lengths = end - start
        offsets, idx = gather_ranges(start, lengths)
        age = age_buckets(t, lengths, self.key[idx] & 0xFFFFFFFF)
        return offsets, {
            "hist_item_id": self.item[idx],
            "hist_category": self.category[idx],
            "hist_action": self.action[idx],
            "hist_age": age,
        }


@dataclass
class Background:
    """The background events of every day, in (day, user, time) order, ties in drawing order."""

    user: np.ndarray
    t: np.ndarray
    item: np.ndarray
    category: np.ndarray
    action: np.ndarray
    day_start: np.ndarray  # [days_total + 1]: the first event of each day from -history_days

    def add_to(self, timeline: Timeline, first_day: int, end_day: int) -> None:
        """Merge the events of days ``[first_day, end_day)`` (timeline days: 0 is the first day
        of the pre-history) into ``timeline``."""
        sl = slice(int(self.day_start[first_day]), int(self.day_start[end_day]))
        timeline.add(self.user[sl], self.t[sl], self.item[sl], self.category[sl],
                     self.action[sl])


def _key(users: np.ndarray, t: np.ndarray) -> np.ndarray:
    return (users.astype(np.int64) << 32) | t.astype(np.int64)


def event_rate_scale(world: World) -> float:
    """Events per user-day per unit activity so an impression's mean history is mean_history.

    Impressions pick users by ``impression_weight``, so the mean is weighted by it; the
    impression time is uniform over the data days, after the full pre-history.
    """
    cfg, act = world.cfg, world.user_activity
    w = world.impression_weight
    mean_elapsed_days = cfg.history_days + cfg.n_days / 2.0
    return cfg.mean_history / (mean_elapsed_days * float((w * act).sum() / w.sum()))


PICK_CHUNK = 1 << 16  # events per vectorised block: bounds memory at chunk x candidates x k


def sample_topics(world: World, users: np.ndarray, days: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """A topic per event from the user's interests on that day (Gumbel-max over topics).

    In blocks of ``PICK_CHUNK`` events (the Gumbel noise drawn block after block is the same
    stream as drawn at once): the ``[events, topics]`` float64 noise would be the generator's
    largest array.
    """
    out = np.empty(len(users), dtype=np.int64)
    for lo in range(0, len(users), PICK_CHUNK):
        sl = slice(lo, lo + PICK_CHUNK)
        vec = world.user_vec[days[sl] + world.cfg.history_days, users[sl]]
        logits = INTEREST_TEMPERATURE * vec @ world.topic_centers.T
        out[sl] = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
    return out


def pick_by_affinity(pool: np.ndarray, pool_topic: np.ndarray, pool_vec: np.ndarray,
                     topics: np.ndarray, user_vec: np.ndarray, beta: np.ndarray, n_topics: int,
                     n_candidates: int, rng: np.random.Generator) -> np.ndarray:
    """Per event, the member of ``pool`` the user engaged with: ``n_candidates`` random members
    of the event's topic (any members if the topic has none), of which the one maximising
    ``beta * <user_vec, item vec> + Gumbel`` (a softmax choice; beta = 0 is a uniform pick).

    ``pool_vec[i]`` is the latent vector of ``pool[i]``; ``user_vec[e]`` and ``beta[e]`` are the
    event's. Vectorised in blocks of ``PICK_CHUNK`` events.
    """
    order = np.argsort(pool_topic, kind="stable")
    sorted_pool, sorted_vec = pool[order], pool_vec[order]
    counts = np.bincount(pool_topic, minlength=n_topics)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = np.empty(len(topics), dtype=np.int64)
    for lo in range(0, len(topics), PICK_CHUNK):
        sl = slice(lo, lo + PICK_CHUNK)
        top = topics[sl]
        c = counts[top][:, None]
        u = rng.random((len(top), n_candidates))
        fallback = rng.integers(0, len(pool), (len(top), n_candidates))
        idx = np.where(c > 0, starts[top][:, None] + (u * c).astype(np.int64), fallback)
        aff = np.einsum("nk,nmk->nm", user_vec[sl], sorted_vec[idx])
        score = beta[sl, None] * aff + rng.gumbel(size=aff.shape)
        out[sl] = sorted_pool[idx[np.arange(len(top)), np.argmax(score, axis=1)]]
    return out


def build_timeline(world: World, rng: np.random.Generator) -> Background:
    """Background engagement from the start of the pre-history to the last day.

    Each event's topic comes from the user's interests on that day; its item is picked among a
    few of that topic's items by affinity with the user's vector on that day (views weakly,
    likes strongly, ad clicks as strongly as the click label weighs affinity), so the engaged
    items reveal the user's individual taste, more precisely the more events there are.
    """
    cfg = world.cfg
    days_total = cfg.history_days + cfg.n_days
    rate = event_rate_scale(world) * world.user_activity * days_total
    counts = rng.poisson(rate)
    users = np.repeat(np.arange(cfg.n_users), counts)
    t = rng.integers(0, days_total * DAY, len(users))
    days = (t // DAY).astype(np.int64) - cfg.history_days
    topics = sample_topics(world, users, days, rng)
    organic = rng.random(len(users)) < cfg.organic_share
    is_like = rng.random(len(users)) < cfg.like_share
    is_conv = rng.random(len(users)) < 0.05
    uvec = world.user_vec[days + cfg.history_days, users]
    beta = np.where(organic, np.where(is_like, cfg.like_affinity, cfg.view_affinity),
                    cfg.affinity_scale)

    item = np.empty(len(users), dtype=np.int64)
    org = np.flatnonzero(organic)
    item[org] = world.n_ads_total + pick_by_affinity(
        np.arange(cfg.n_content), world.content_topic, world.content_vec, topics[org],
        uvec[org], beta[org], cfg.n_topics, cfg.event_candidates, rng)
    ad_events = np.flatnonzero(~organic)
    for day in np.unique(days[ad_events]):
        sel = ad_events[days[ad_events] == day]
        alive = world.alive_ads(int(day))
        item[sel] = pick_by_affinity(alive, world.ad_topic[alive],
                                     world.ad_vec[world.day_row(int(day)), alive], topics[sel],
                                     uvec[sel], beta[sel], cfg.n_topics, cfg.event_candidates,
                                     rng)
    del uvec, beta, topics, org, ad_events

    action = np.where(organic, np.where(is_like, ACTION_LIKE, ACTION_VIEW),
                      np.where(is_conv, ACTION_CONVERSION, ACTION_CLICK))
    category = np.where(organic, world.content_topic[np.maximum(item - world.n_ads_total, 0)],
                        world.ad_topic[np.minimum(item, world.n_ads_total - 1)])
    order = np.lexsort((t, users, days))  # stable: ties keep the drawing order
    day_start = np.searchsorted(days[order], np.arange(-cfg.history_days, cfg.n_days + 1))
    return Background(users[order], t[order], item[order], category[order].astype(np.int32),
                      action[order].astype(np.int32), day_start)
