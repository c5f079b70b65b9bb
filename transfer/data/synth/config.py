"""Every knob of the synthetic ads world; README "Synthetic world keys" documents each one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SynthConfig:
    seed: int = 0
    # size and time
    n_days: int = 14
    examples_per_day: int = 20_000
    n_users: int = 20_000
    n_ads: int = 2_000
    n_advertisers: int = 200
    n_content: int = 5_000
    n_topics: int = 32
    n_domains: int = 3
    latent_dim: int = 16
    n_creative: int = 8
    # ad churn
    new_ads_per_day: int = 100
    ad_lifetime_days: float = 30.0
    # user histories
    history_days: int = 30
    mean_history: float = 50.0
    history_sigma: float = 1.5
    max_history: int = 4096
    organic_share: float = 0.8
    # serving and labels
    ad_candidates: int = 16
    targeting: float = 1.0
    affinity_scale: float = 5.0
    domain_interaction: float = 0.5
    click_bias: float = -3.5
    conversion_bias: float = -4.5
    engage_bias: float = -1.5
    # non-stationarity
    drift: float = 0.3

    def __post_init__(self) -> None:
        positive = [
            "n_days", "examples_per_day", "n_users", "n_ads", "n_advertisers", "n_content",
            "n_topics", "n_domains", "latent_dim", "n_creative", "history_days", "max_history",
            "ad_candidates",
        ]
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"key {name!r} must be >= 1, got {getattr(self, name)}")
        for name in ["new_ads_per_day", "ad_lifetime_days", "mean_history", "history_sigma",
                     "drift", "targeting"]:
            if getattr(self, name) < 0:
                raise ValueError(f"key {name!r} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.organic_share <= 1.0:
            raise ValueError(f"key 'organic_share' must be in [0, 1], got {self.organic_share}")
