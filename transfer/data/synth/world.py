"""Latent entities of the synthetic world: users, ads, advertisers, content, domains.

Users and ads carry latent interest vectors built from shared topic centres, so engagement with
one item tells something about others of its topic. Drift is a per-day random walk of those
vectors (and of the domain mix) whose step size is the ``drift`` knob; day index ``t`` runs from
``-history_days`` (the pre-history that fills user timelines) to ``n_days - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transfer.data.synth.config import SynthConfig

N_AGE_BUCKETS = 8
N_COUNTRIES = 20
N_DEVICES = 4
N_AD_FORMATS = 4
DOMAIN_NAMES = ["feed", "stories", "messaging", "reels", "search", "marketplace"]
# Per-day variance share replaced by fresh noise at drift = 1 (users, ads); domain-mix slope.
USER_STEP, AD_STEP, DOMAIN_SHIFT = 0.1, 0.1, 0.08


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
    domain_gain: np.ndarray  # [n_dom, k]: user x domain interaction in affinity
    domain_bias: np.ndarray  # [n_dom, 3]: click, conversion, engage
    domain_logits0: np.ndarray
    domain_shift: np.ndarray
    age_topic_effect: np.ndarray  # [N_AGE_BUCKETS, T]
    device_format_effect: np.ndarray  # [N_DEVICES, N_AD_FORMATS]
    intent: np.ndarray  # [k, k]: conversion's own user-ad interaction

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


def build_world(cfg: SynthConfig, rng: np.random.Generator) -> World:
    k, n_topics, n_dom = cfg.latent_dim, cfg.n_topics, cfg.n_domains
    days_total = cfg.history_days + cfg.n_days
    centers = _unit(rng.normal(size=(n_topics, k)))

    def user_prior(r: np.random.Generator, n: int) -> np.ndarray:
        main, second = r.integers(0, n_topics, n), r.integers(0, n_topics, n)
        return _unit(0.8 * centers[main] + 0.4 * centers[second] + 0.35 * r.normal(size=(n, k)))

    def ad_prior_for(topics: np.ndarray):
        def prior(r: np.random.Generator, n: int) -> np.ndarray:
            return _unit(0.85 * centers[topics] + 0.45 * r.normal(size=(n, k)))
        return prior

    u = cfg.n_users
    user_vec = _random_walk(rng, user_prior(rng, u), days_total, USER_STEP * cfg.drift,
                            user_prior)
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

    return World(
        cfg=cfg,
        topic_centers=centers,
        user_vec=user_vec,
        user_activity=activity,
        user_bias=rng.normal(0, 0.3, u).astype(np.float32),
        user_engage_bias=rng.normal(0, 0.3, u).astype(np.float32),
        user_domain_pref=rng.normal(0, 0.8, (u, n_dom)).astype(np.float32),
        user_domain_bias=rng.normal(0, 0.3, (u, n_dom)).astype(np.float32),
        user_age=rng.integers(0, N_AGE_BUCKETS, u),
        user_country=np.minimum(rng.zipf(1.5, u) - 1, N_COUNTRIES - 1),
        user_device=rng.integers(0, N_DEVICES, u),
        ad_vec=ad_vec,
        ad_topic=ad_topic,
        ad_advertiser=ad_advertiser,
        ad_bias=rng.normal(0, 0.3, a).astype(np.float32),
        ad_format=rng.integers(0, N_AD_FORMATS, a),
        ad_bid=rng.lognormal(0.0, 0.5, a).astype(np.float32),
        ad_creative=creative.astype(np.float32),
        ad_birth=birth.astype(np.int64),
        ad_death=death.astype(np.int64),
        advertiser_quality=rng.normal(0, 0.5, cfg.n_advertisers).astype(np.float32),
        content_topic=rng.integers(0, n_topics, cfg.n_content),
        domain_gain=np.clip(1 + cfg.domain_interaction * rng.normal(size=(n_dom, k)), 0, None)
        .astype(np.float32),
        domain_bias=rng.normal(0, 0.4, (n_dom, 3)).astype(np.float32),
        domain_logits0=rng.normal(0, 0.5, n_dom),
        domain_shift=_unit(rng.normal(size=n_dom)).astype(np.float64),
        age_topic_effect=rng.normal(0, 0.3, (N_AGE_BUCKETS, n_topics)).astype(np.float32),
        device_format_effect=rng.normal(0, 0.3, (N_DEVICES, N_AD_FORMATS)).astype(np.float32),
        intent=(rng.normal(size=(k, k)) / np.sqrt(k)).astype(np.float32),
    )
