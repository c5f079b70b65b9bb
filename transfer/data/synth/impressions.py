"""One day of ad impressions: who saw which ad where, with true probabilities and labels.

A day is drawn whole (``sample_impressions``: a few arrays of the day's length) and turned into
rows a row group at a time (``impression_table``): the histories, a hundred-odd events a row,
are never gathered for the whole day.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gemkd.transfer.data.synth.timeline import ACTION_CLICK, ACTION_CONVERSION, DAY, Timeline
from gemkd.transfer.data.synth.world import World

EPOCH = 1_700_000_000  # ts of the start of day 0


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _list_array(offsets: np.ndarray, values: np.ndarray) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))


@dataclass
class LabelLogits:
    """The label logits ``[n, 3]`` (click, conversion given click, engage) in three parts."""

    rest: np.ndarray  # intercepts, calibration drift, domain, ad, advertiser and context effects
    user: np.ndarray  # the terms linear in the user's latent vector (affinity, intent)
    user_bias: np.ndarray  # per-user scalar biases, which no feature or history reveals

    def total(self, user_scale: float = 1.0, user_bias: bool = True) -> np.ndarray:
        return self.rest + user_scale * self.user + (self.user_bias if user_bias else 0.0)


def label_logits(world: World, day: int, users: np.ndarray, ads: np.ndarray,
                 domain: np.ndarray, user_vec: np.ndarray) -> LabelLogits:
    """The world's label logits of impressions of ``ads`` to ``users`` on ``day``, with
    ``user_vec`` as the users' latent vectors (their true vectors on that day, or an estimate).
    """
    cfg, row = world.cfg, world.day_row(day)
    ad_vec = world.ad_vec[row, ads]
    aff = np.einsum("nk,nk->n", user_vec * world.domain_gain[domain], ad_vec)
    intent = np.einsum("nk,kj,nj->n", user_vec, world.intent, ad_vec)
    age, device = world.user_age[users], world.user_device[users]
    topic, fmt = world.ad_topic[ads], world.ad_format[ads]
    context = world.age_topic_effect[age, topic] + world.device_format_effect[device, fmt]
    cal = world.calibration(day, domain, topic)
    s = cfg.affinity_scale
    rest = np.stack([
        cfg.click_bias + world.domain_bias[domain, 0] + world.ad_bias[ads] + context,
        cfg.conversion_bias + world.domain_bias[domain, 1]
        + world.advertiser_quality[world.ad_advertiser[ads]],
        cfg.engage_bias + world.domain_bias[domain, 2] + 0.5 * context,
    ], axis=1) + cal
    user = np.stack([s * aff, 0.6 * s * (aff + intent), s * aff], axis=1)
    bias = np.stack([world.user_bias[users] + world.user_domain_bias[users, domain],
                     np.zeros(len(users), dtype=np.float32), world.user_engage_bias[users]],
                    axis=1)
    return LabelLogits(rest, user, bias)


@dataclass
class Impressions:
    """One day's impressions in time order: everything drawn from the seed's stream for them."""

    day: int
    users: np.ndarray
    t: np.ndarray  # seconds since the start of the pre-history
    domain: np.ndarray
    ads: np.ndarray
    p_click: np.ndarray
    p_conv_given_click: np.ndarray
    p_engage: np.ndarray
    click: np.ndarray
    conversion: np.ndarray
    engage: np.ndarray

    def __len__(self) -> int:
        return len(self.users)


SCORE_CHUNK = 1 << 14  # impressions scored at once: bounds their candidates' vectors and logits


def sample_impressions(world: World, day: int, rng: np.random.Generator) -> Impressions:
    """Sample one day of impressions in time order: users, domains, the served ads, the true
    probabilities and the labels (every draw of the day, in the seed's order)."""
    cfg = world.cfg
    n = cfg.examples_per_day
    row = world.day_row(day)
    cum = np.cumsum(world.impression_weight)
    users = np.minimum(np.searchsorted(cum, rng.random(n) * cum[-1]), cfg.n_users - 1)
    t = (cfg.history_days + day) * DAY + rng.integers(0, DAY, n)
    order = np.argsort(t, kind="stable")
    users, t = users[order], t[order]
    del order

    dprob = world.domain_probs(day, users)
    domain = np.argmax(np.log(dprob) + rng.gumbel(size=dprob.shape), axis=1)
    del dprob

    # Serving picks the best of a few random live ads by a noisy relevance score; the served
    # ad's label logits follow. Both in blocks: the candidates' vectors are [n, candidates, k]
    # and the logits' parts a dozen [n, k] arrays; the noise drawn block by block is the same
    # stream as drawn at once.
    alive = world.alive_ads(day)
    cands = alive[rng.integers(0, len(alive), (n, cfg.ad_candidates))]
    ads = np.empty(n, dtype=cands.dtype)
    probs = None  # [3, n]: click, conversion given click, engage (the logits' float type)
    for lo in range(0, n, SCORE_CHUNK):
        sl = slice(lo, lo + SCORE_CHUNK)
        uvec = world.user_vec[row, users[sl]]
        cand_aff = np.einsum("nk,nck->nc", uvec * world.domain_gain[domain[sl]],
                             world.ad_vec[row, cands[sl]])
        pick = np.argmax(cfg.targeting * cand_aff + rng.gumbel(size=cand_aff.shape), axis=1)
        ads[sl] = cands[sl][np.arange(len(pick)), pick]
        f = label_logits(world, day, users[sl], ads[sl], domain[sl], uvec).total()
        if probs is None:
            probs = np.empty((3, n), dtype=f.dtype)
        probs[:, sl] = _sigmoid(f.T)
    del cands
    assert probs is not None  # n >= 1 (SynthConfig)
    p_click, p_conv_given_click, p_engage = probs
    click = rng.random(n) < p_click
    conversion = click & (rng.random(n) < p_conv_given_click)
    engage = rng.random(n) < p_engage
    return Impressions(day, users, t, domain, ads, p_click, p_conv_given_click, p_engage, click,
                       conversion, engage)


def add_clicks(timeline: Timeline, world: World, imp: Impressions) -> None:
    """The day's clicks (conversions) join the users' timelines, after its impressions."""
    clicked = np.flatnonzero(imp.click)
    ads = imp.ads[clicked]
    timeline.add(imp.users[clicked], imp.t[clicked], ads, world.ad_topic[ads],
                 np.where(imp.conversion[clicked], ACTION_CONVERSION, ACTION_CLICK))


def impression_table(world: World, imp: Impressions, rows: slice, first_id: int,
                     timeline: Timeline) -> pa.Table:
    """The impressions ``rows`` of the day as a table, ``first_id`` the day's first example id;
    histories from ``timeline`` (the users' events up to the day, not its clicks)."""
    cfg = world.cfg
    users, t, ads = imp.users[rows], imp.t[rows], imp.ads[rows]
    n, lo = len(users), rows.start
    topic, fmt = world.ad_topic[ads], world.ad_format[ads]
    adv, age, device = world.ad_advertiser[ads], world.user_age[users], world.user_device[users]
    click, conversion = imp.click[rows], imp.conversion[rows]
    p_click = imp.p_click[rows]
    offsets, hist = timeline.histories(users, t, cfg.max_history)
    columns = {
        "example_id": pa.array(np.arange(first_id + lo, first_id + lo + n, dtype=np.int64)),
        "ts": pa.array((EPOCH + t - cfg.history_days * DAY).astype(np.int64)),
        "day": pa.array(np.full(n, imp.day, dtype=np.int32)),
        "domain": pa.array(imp.domain[rows].astype(np.int16)),
        "user_id": pa.array(users.astype(np.int64)),
        "ad_id": pa.array(ads.astype(np.int64)),
        "advertiser_id": pa.array(adv.astype(np.int64)),
        "ad_category": pa.array(topic.astype(np.int64)),
        "age_bucket": pa.array(age.astype(np.int64)),
        "country": pa.array(world.user_country[users].astype(np.int64)),
        "device": pa.array(device.astype(np.int64)),
        "ad_format": pa.array(fmt.astype(np.int64)),
        "bid": pa.array(world.ad_bid[ads]),
    }
    creative = world.ad_creative[ads]
    for j in range(cfg.n_creative):
        columns[f"creative_{j}"] = pa.array(np.ascontiguousarray(creative[:, j]))
    for name, values in hist.items():
        columns[name] = _list_array(offsets, values)
    del hist
    columns["click"] = pa.array(click.astype(np.int8))
    columns["conversion"] = pa.array(conversion.astype(np.int8))
    columns["engage"] = pa.array(imp.engage[rows].astype(np.int8))
    columns["p_click"] = pa.array(p_click.astype(np.float32))
    columns["p_conversion"] = pa.array(
        (p_click * imp.p_conv_given_click[rows]).astype(np.float32))
    columns["p_engage"] = pa.array(imp.p_engage[rows].astype(np.float32))
    return pa.table(columns)
