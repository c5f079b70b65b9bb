"""Every knob of the synthetic ads world; docs/guides/data.md documents each one.

Defaults are meant to be realistic where it matters for transfer (DESIGN §2.3), never tuned until
a particular model wins; each one's reason:

- Density (``examples_per_day`` / ``n_users``): a real user sees dozens of ads a day, so the
  defaults (and the presets) give the median user ~100 impressions in a 9-day teacher window,
  with a heavy tail both ways (impressions follow the square root of the lognormal activity).
  Fewer users rather than more rows keeps the CPU budgets.
- Histories that reveal taste: content items have latent vectors of their own, around their
  topic centre like ads, and every timeline event picks its item among ``event_candidates`` of
  the sampled topic by affinity with the user's vector on that day (softmax choice, Gumbel-max,
  of ``affinity * <user, item>``). ``view_affinity`` 3 makes a view a weak, mostly incidental
  signal and ``like_affinity`` 6 a like a deliberate one (likes are the sparse, high-intent
  feedback in production); a background ad click weighs affinity as the click label does
  (``affinity_scale``). One event then says little about a user's individual taste and a few
  hundred say a lot: the information in a history keeps growing well past 20 events, as
  production's long-sequence models find (see ``gemkd.transfer.data.synth.feature_oracle``).
- ``stable_interest`` 0.8: most of a user's taste is a stable core; the rest is short-term
  interest that random-walks (``drift``). In production long histories pay because core
  interests last for months; with the whole vector random-walking (0, the first
  implementation) a month-old event says little about today. The day-to-day change of a
  user's vector is ``drift``'s either way, so a stale teacher still pays for it.
- ``user_bias`` 0.1: the per-user scalar biases (click and engage propensity, user x domain)
  are signal no feature or history reveals and a model can learn only from a user's own few
  clicks; 0.1 logit std (against ~1.2 for the user-ad affinity term) keeps that idiosyncratic
  share small, as in production where features and histories carry most of the signal. The
  first implementation used 0.3 each.
- Calibration drift: ``calibration_drift`` 0.05 (daily logit step of a random walk per domain x
  task and per ad category, from day 0) and ``weekly_amplitude`` 0.05 are at the low end of
  real logs (``studies/base_rate_drift.py``: KuaiRand's daily click logit moves by ~0.05
  a day on its main surface and up to ~0.17 on smaller ones; MovieLens' rating >= 4 logit by
  ~0.3 per time bucket of a few months).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SynthConfig:
    seed: int = 0
    # size and time
    n_days: int = 14
    examples_per_day: int = 20_000
    n_users: int = 1_300
    n_ads: int = 2_000
    n_advertisers: int = 200
    n_content: int = 3_000
    n_topics: int = 32
    n_domains: int = 3
    latent_dim: int = 16
    n_creative: int = 8
    # ad churn
    new_ads_per_day: int = 100
    ad_lifetime_days: float = 30.0
    # user histories
    history_days: int = 30
    mean_history: float = 150.0
    history_sigma: float = 1.5
    max_history: int = 4096
    organic_share: float = 0.8
    like_share: float = 0.25
    event_candidates: int = 8
    view_affinity: float = 3.0
    like_affinity: float = 6.0
    # serving and labels
    ad_candidates: int = 16
    targeting: float = 1.0
    affinity_scale: float = 5.0
    domain_interaction: float = 0.5
    user_bias: float = 0.1
    click_bias: float = -3.5
    conversion_bias: float = -4.5
    engage_bias: float = -1.5
    # non-stationarity
    drift: float = 0.3
    stable_interest: float = 0.8
    calibration_drift: float = 0.05
    weekly_amplitude: float = 0.05

    def __post_init__(self) -> None:
        positive = [
            "n_days", "examples_per_day", "n_users", "n_ads", "n_advertisers", "n_content",
            "n_topics", "n_domains", "latent_dim", "n_creative", "history_days", "max_history",
            "ad_candidates", "event_candidates",
        ]
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"key {name!r} must be >= 1, got {getattr(self, name)}")
        for name in ["new_ads_per_day", "ad_lifetime_days", "mean_history", "history_sigma",
                     "drift", "targeting", "view_affinity", "like_affinity", "user_bias",
                     "calibration_drift", "weekly_amplitude"]:
            if getattr(self, name) < 0:
                raise ValueError(f"key {name!r} must be >= 0, got {getattr(self, name)}")
        for name in ["organic_share", "like_share", "stable_interest"]:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"key {name!r} must be in [0, 1], got {getattr(self, name)}")
