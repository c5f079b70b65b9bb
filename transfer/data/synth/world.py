"""Latent entities of the synthetic world: users, ads, advertisers, content, domains.

Users, ads and organic content items carry latent interest vectors built around shared topic
centres, so engagement with one item tells something about others of its topic, and the item's
own vector tells something about the user's individual taste. Interest drift is a per-day random
walk of the user and ad vectors (and of the domain mix) whose step size is the ``drift`` knob;
day index ``t`` runs from ``-history_days`` (the pre-history that fills user timelines) to
``n_days - 1``. Calibration drift moves the label intercepts per domain (and task) and per ad
category over the data days: a random walk of daily step ``calibration_drift`` plus a weekly
cycle of amplitude ``weekly_amplitude``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemkd.transfer.data.synth.synth_config import SynthConfig

N_AGE_BUCKETS = 8
N_COUNTRIES = 20
N_DEVICES = 4
N_AD_FORMATS = 4
DOMAIN_NAMES = ["feed", "stories", "messaging", "reels", "search", "marketplace"]
# Per-day variance share replaced by fresh noise at drift = 1 (users, ads); domain-mix slope.
USER_STEP, AD_STEP, DOMAIN_SHIFT = 0.1, 0.1, 0.08
# Ads and content items: unit(ITEM_CENTER * topic centre + ITEM_SPREAD * N(0, I)).
ITEM_CENTER, ITEM_SPREAD = 0.85, 0.45
WEEK = 7
# Seed streams besides the main one (``default_rng(seed)``): calibration drift has its own, so
# switching it on or off changes the labels' probabilities and nothing else.
CALIBRATION_STREAM = 1


def domain_names(n: int) -> list[str]:
    return DOMAIN_NAMES[:n] if n <= len(DOMAIN_NAMES) else [f"domain_{i}" for i in range(n)]


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@dataclass
class World:
    cfg: SynthConfig
    topic_centers: np.ndarray  # [T, k]
    user_vec: np.ndarray  # [days_total, U, k]; row t + history_days is day t
    user_activity: np.ndarray  # [U], mean 1, lognormal
    user_bias: np.ndarray
    user_engage_bias: np.ndarray
    user_domain_pref: np.ndarray  # [U, n_dom]
    user_domain_bias: np.ndarray  # [U, n_dom]
    user_age: np.ndarray
    user_country: np.ndarray
    user_device: np.ndarray
    ad_vec: np.ndarray  # [days_total, A, k]
    ad_topic: np.ndarray
    ad_advertiser: np.ndarray
    ad_bias: np.ndarray
    ad_format: np.ndarray
    ad_bid: np.ndarray
    ad_creative: np.ndarray  # [A, n_creative], fixed at launch
    ad_birth: np.ndarray  # first day alive
    ad_death: np.ndarray  # first day no longer alive
    advertiser_quality: np.ndarray
    content_topic: np.ndarray
    content_vec: np.ndarray  # [C, k], static
    domain_gain: np.ndarray  # [n_dom, k]: user x domain interaction in affinity
    domain_bias: np.ndarray  # [n_dom, 3]: click, conversion, engage
    domain_logits0: np.ndarray
    domain_shift: np.ndarray
    age_topic_effect: np.ndarray  # [N_AGE_BUCKETS, T]
    device_format_effect: np.ndarray  # [N_DEVICES, N_AD_FORMATS]
    intent: np.ndarray  # [k, k]: conversion's own user-ad interaction
    calibration_domain: np.ndarray  # [n_days, n_dom, 3]: logit offsets (click, conv, engage)
    calibration_category: np.ndarray  # [n_days, T]: logit offset of an ad category, all tasks

    @property
    def n_ads_total(self) -> int:
        return len(self.ad_topic)

    def day_row(self, day: int) -> int:
        return day + self.cfg.history_days

    @property
    def impression_weight(self) -> np.ndarray:
        """Heavy users see more ads, but less than in proportion to their engagement."""
        return np.sqrt(self.user_activity)

    def alive_ads(self, day: int) -> np.ndarray:
        return np.flatnonzero((self.ad_birth <= day) & (self.ad_death > day))

    def calibration(self, day: int, domain: np.ndarray, topic: np.ndarray) -> np.ndarray:
        """Calibration drift's logit offsets ``[n, 3]`` (click, conversion, engage) on ``day``."""
        return (self.calibration_domain[day, domain]
                + self.calibration_category[day, topic][:, None])

    def domain_probs(self, day: int, users: np.ndarray) -> np.ndarray:
        logits = self.domain_logits0 + self.cfg.drift * DOMAIN_SHIFT * day * self.domain_shift
        z = logits[None, :] + self.user_domain_pref[users]
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)


def _random_walk(rng: np.random.Generator, start: np.ndarray, steps: int, step: float,
                 prior) -> np.ndarray:
    """Vectors at ``steps`` consecutive days; each day keeps ``1-step`` of the variance."""
    out = np.empty((steps, *start.shape), dtype=np.float32)
    out[0] = start
    keep, fresh = np.sqrt(1.0 - step), np.sqrt(step)
    for t in range(1, steps):
        out[t] = _unit(keep * out[t - 1] + fresh * prior(rng, start.shape[0]))
    return out


def _user_vectors(rng: np.random.Generator, core: np.ndarray, steps: int, cfg: SynthConfig,
                  prior) -> np.ndarray:
    """A user's vector on each day: ``unit(sqrt(s) core + sqrt(1 - s) walk_t)``, s =
    ``stable_interest``. The core taste never moves; the short-term walk starts at the core and
    random-walks fast enough that the user's vector changes day to day by ``USER_STEP * drift``
    of its variance, as a single walk would, but keeps ``s`` of it for good.
    s = 0 is a single random walk of the whole vector.
    """
    s = cfg.stable_interest
    step = min(1.0, USER_STEP * cfg.drift / (1.0 - s)) if s < 1 else 0.0
    walk = _random_walk(rng, core, steps, step, prior)
    if s == 0:
        return walk
    return _unit(np.sqrt(s) * core[None] + np.sqrt(1.0 - s) * walk)


def _calibration_walk(rng: np.random.Generator, n_days: int, shape: tuple[int, ...],
                      step: float, weekly: float) -> np.ndarray:
    """``[n_days, *shape]`` logit offsets: a random walk from 0 on day 0 plus a weekly cycle.

    The standard normals are drawn whatever the knobs, so the knobs only scale them.
    """
    steps = rng.normal(size=(n_days, *shape))
    steps[0] = 0.0
    phase = rng.uniform(0.0, 2 * np.pi, size=shape)
    cycle = np.sin(2 * np.pi * np.arange(n_days).reshape(-1, *[1] * len(shape)) / WEEK + phase)
    return (step * np.cumsum(steps, axis=0) + weekly * cycle).astype(np.float32)


def build_world(cfg: SynthConfig, rng: np.random.Generator) -> World:
    k, n_topics, n_dom = cfg.latent_dim, cfg.n_topics, cfg.n_domains
    days_total = cfg.history_days + cfg.n_days
    centers = _unit(rng.normal(size=(n_topics, k)))

    def user_prior(r: np.random.Generator, n: int) -> np.ndarray:
        main, second = r.integers(0, n_topics, n), r.integers(0, n_topics, n)
        return _unit(0.8 * centers[main] + 0.4 * centers[second] + 0.35 * r.normal(size=(n, k)))

    def ad_prior_for(topics: np.ndarray):
        def prior(r: np.random.Generator, n: int) -> np.ndarray:
            return _unit(ITEM_CENTER * centers[topics] + ITEM_SPREAD * r.normal(size=(n, k)))
        return prior

    u = cfg.n_users
    user_vec = _user_vectors(rng, user_prior(rng, u), days_total, cfg, user_prior)
    activity = rng.lognormal(0.0, cfg.history_sigma, u)
    activity = (activity / activity.mean()).astype(np.float64)

    # Ads: the initial inventory is alive through the pre-history; new ads launch every day.
    n_new = cfg.new_ads_per_day * cfg.n_days
    a = cfg.n_ads + n_new
    birth = np.concatenate([np.full(cfg.n_ads, -cfg.history_days),
                            np.repeat(np.arange(cfg.n_days), cfg.new_ads_per_day)])
    if cfg.ad_lifetime_days > 0:
        life = np.maximum(1, np.ceil(rng.exponential(cfg.ad_lifetime_days, a))).astype(np.int64)
        start = np.where(birth < 0, 0, birth)  # residual lifetime of the initial inventory
        death = start + life
    else:
        death = np.full(a, np.iinfo(np.int32).max, dtype=np.int64)
    advertiser_topic = rng.integers(0, n_topics, cfg.n_advertisers)
    advertiser_weight = rng.zipf(1.6, cfg.n_advertisers).astype(np.float64)
    ad_advertiser = rng.choice(cfg.n_advertisers, a, p=advertiser_weight / advertiser_weight.sum())
    own_topic = rng.random(a) < 0.8
    ad_topic = np.where(own_topic, advertiser_topic[ad_advertiser], rng.integers(0, n_topics, a))
    ad_prior = ad_prior_for(ad_topic)
    ad_vec = _random_walk(rng, ad_prior(rng, a), days_total, AD_STEP * cfg.drift, ad_prior)
    creative_proj = rng.normal(size=(k, cfg.n_creative)) / np.sqrt(k)
    launch_vec = ad_vec[np.clip(birth + cfg.history_days, 0, days_total - 1), np.arange(a)]
    creative = launch_vec @ creative_proj * 2.0 + 0.5 * rng.normal(size=(a, cfg.n_creative))

    b = cfg.user_bias
    # Drawn in the order of the first implementation's world, new parts after.
    user_bias = (b * rng.normal(size=u)).astype(np.float32)
    user_engage_bias = (b * rng.normal(size=u)).astype(np.float32)
    user_domain_pref = rng.normal(0, 0.8, (u, n_dom)).astype(np.float32)
    user_domain_bias = (b * rng.normal(size=(u, n_dom))).astype(np.float32)
    user_age = rng.integers(0, N_AGE_BUCKETS, u)
    user_country = np.minimum(rng.zipf(1.5, u) - 1, N_COUNTRIES - 1)
    user_device = rng.integers(0, N_DEVICES, u)
    ad_bias = rng.normal(0, 0.3, a).astype(np.float32)
    ad_format = rng.integers(0, N_AD_FORMATS, a)
    ad_bid = rng.lognormal(0.0, 0.5, a).astype(np.float32)
    advertiser_quality = rng.normal(0, 0.5, cfg.n_advertisers).astype(np.float32)
    content_topic = rng.integers(0, n_topics, cfg.n_content)
    domain_gain = np.clip(1 + cfg.domain_interaction * rng.normal(size=(n_dom, k)), 0, None)
    domain_bias = rng.normal(0, 0.4, (n_dom, 3)).astype(np.float32)
    domain_logits0 = rng.normal(0, 0.5, n_dom)
    domain_shift = _unit(rng.normal(size=n_dom)).astype(np.float64)
    age_topic_effect = rng.normal(0, 0.3, (N_AGE_BUCKETS, n_topics)).astype(np.float32)
    device_format_effect = rng.normal(0, 0.3, (N_DEVICES, N_AD_FORMATS)).astype(np.float32)
    intent = (rng.normal(size=(k, k)) / np.sqrt(k)).astype(np.float32)
    content_vec = ad_prior_for(content_topic)(rng, cfg.n_content)
    cal_rng = np.random.default_rng([cfg.seed, CALIBRATION_STREAM])
    cal_domain = _calibration_walk(cal_rng, cfg.n_days, (n_dom, 3), cfg.calibration_drift,
                                   cfg.weekly_amplitude)
    cal_category = _calibration_walk(cal_rng, cfg.n_days, (n_topics,), cfg.calibration_drift,
                                     cfg.weekly_amplitude)

    return World(
        cfg=cfg,
        topic_centers=centers,
        user_vec=user_vec,
        user_activity=activity,
        user_bias=user_bias,
        user_engage_bias=user_engage_bias,
        user_domain_pref=user_domain_pref,
        user_domain_bias=user_domain_bias,
        user_age=user_age,
        user_country=user_country,
        user_device=user_device,
        ad_vec=ad_vec,
        ad_topic=ad_topic,
        ad_advertiser=ad_advertiser,
        ad_bias=ad_bias,
        ad_format=ad_format,
        ad_bid=ad_bid,
        ad_creative=creative.astype(np.float32),
        ad_birth=birth.astype(np.int64),
        ad_death=death.astype(np.int64),
        advertiser_quality=advertiser_quality,
        content_topic=content_topic,
        content_vec=content_vec,
        domain_gain=domain_gain.astype(np.float32),
        domain_bias=domain_bias,
        domain_logits0=domain_logits0,
        domain_shift=domain_shift,
        age_topic_effect=age_topic_effect,
        device_format_effect=device_format_effect,
        intent=intent,
        calibration_domain=cal_domain,
        calibration_category=cal_category,
    )
