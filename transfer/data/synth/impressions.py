"""One day of ad impressions: who saw which ad where, with true probabilities and labels."""

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


def impressions_for_day(world: World, timeline: Timeline, day: int, first_id: int,
                        rng: np.random.Generator) -> pa.Table:
    """Sample one day of impressions in time order; their clicks join the users' timelines."""
    cfg = world.cfg
    n = cfg.examples_per_day
    row = world.day_row(day)
    cum = np.cumsum(world.impression_weight)
    users = np.minimum(np.searchsorted(cum, rng.random(n) * cum[-1]), cfg.n_users - 1)
    t = (cfg.history_days + day) * DAY + rng.integers(0, DAY, n)
    order = np.argsort(t, kind="stable")
    users, t = users[order], t[order]

    dprob = world.domain_probs(day, users)
    domain = np.argmax(np.log(dprob) + rng.gumbel(size=dprob.shape), axis=1)

    # Serving picks the best of a few random live ads by a noisy relevance score.
    alive = world.alive_ads(day)
    uvec = world.user_vec[row, users] * world.domain_gain[domain]
    cands = alive[rng.integers(0, len(alive), (n, cfg.ad_candidates))]
    cand_aff = np.einsum("nk,nck->nc", uvec, world.ad_vec[row, cands])
    pick = np.argmax(cfg.targeting * cand_aff + rng.gumbel(size=cand_aff.shape), axis=1)
    ads = cands[np.arange(n), pick]

    parts = label_logits(world, day, users, ads, domain, world.user_vec[row, users])
    f = parts.total()
    p_click = _sigmoid(f[:, 0])
    p_conv_given_click = _sigmoid(f[:, 1])
    p_engage = _sigmoid(f[:, 2])
    topic, fmt = world.ad_topic[ads], world.ad_format[ads]
    adv, age, device = world.ad_advertiser[ads], world.user_age[users], world.user_device[users]
    click = rng.random(n) < p_click
    conversion = click & (rng.random(n) < p_conv_given_click)
    engage = rng.random(n) < p_engage

    offsets, hist = timeline.histories(users, t, cfg.max_history)
    clicked = np.flatnonzero(click)
    timeline.add(users[clicked], t[clicked], ads[clicked], topic[clicked],
                 np.where(conversion[clicked], ACTION_CONVERSION, ACTION_CLICK))

    columns = {
        "example_id": pa.array(np.arange(first_id, first_id + n, dtype=np.int64)),
        "ts": pa.array((EPOCH + t - cfg.history_days * DAY).astype(np.int64)),
        "day": pa.array(np.full(n, day, dtype=np.int32)),
        "domain": pa.array(domain.astype(np.int16)),
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
    columns["click"] = pa.array(click.astype(np.int8))
    columns["conversion"] = pa.array(conversion.astype(np.int8))
    columns["engage"] = pa.array(engage.astype(np.int8))
    columns["p_click"] = pa.array(p_click.astype(np.float32))
    columns["p_conversion"] = pa.array((p_click * p_conv_given_click).astype(np.float32))
    columns["p_engage"] = pa.array(p_engage.astype(np.float32))
    return pa.table(columns)
