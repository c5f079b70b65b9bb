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
from typing import Annotated

from gemkd.transfer.constraints import Rule, at_least, check_fields

#: the rules of the world's keys (read by gemkd.transfer.constraints.check_fields)
Count = Annotated[int, at_least(1, "key {key!r} must be >= 1, got {value}")]
NonNegativeInt = Annotated[int, at_least(0, "key {key!r} must be >= 0, got {value}")]
NonNegative = Annotated[float, at_least(0, "key {key!r} must be >= 0, got {value}")]
Share = Annotated[float, Rule(lambda v: 0.0 <= v <= 1.0, "key {key!r} must be in [0, 1], got "
                                                          "{value}")]


@dataclass
class SynthConfig:
    """The synthetic ads world's knobs, each with its default and rule (docs/guides/data.md; the
    module docstring says why each default); a broken rule is a ValueError naming the key.
    """

    seed: int = 0
    # size and time
    n_days: Count = 14
    examples_per_day: Count = 20_000
    n_users: Count = 1_300
    n_ads: Count = 2_000
    n_advertisers: Count = 200
    n_content: Count = 3_000
    n_topics: Count = 32
    n_domains: Count = 3
    latent_dim: Count = 16
    n_creative: Count = 8
    # ad churn
    new_ads_per_day: NonNegativeInt = 100
    ad_lifetime_days: NonNegative = 30.0
    # user histories
    history_days: Count = 30
    mean_history: NonNegative = 150.0
    history_sigma: NonNegative = 1.5
    max_history: Count = 4096
    organic_share: Share = 0.8
    like_share: Share = 0.25
    event_candidates: Count = 8
    view_affinity: NonNegative = 3.0
    like_affinity: NonNegative = 6.0
    # serving and labels
    ad_candidates: Count = 16
    targeting: NonNegative = 1.0
    affinity_scale: float = 5.0
    domain_interaction: float = 0.5
    user_bias: NonNegative = 0.1
    click_bias: float = -3.5
    conversion_bias: float = -4.5
    engage_bias: float = -1.5
    # non-stationarity
    drift: NonNegative = 0.3
    stable_interest: Share = 0.8
    calibration_drift: NonNegative = 0.05
    weekly_amplitude: NonNegative = 0.05

    def __post_init__(self) -> None:
        check_fields(self)
