"""Simulated per-user evaluation sums, drawn like a run's ``clusters/`` files, for A/A and
known-effect checks of the report's intervals.

Why: whether a 95 % interval holds its 95 % depends on how many top-level units a run has and
on which noise dominates; the only way to know is to push many runs whose truth is known through
the real interval code. Every arm's per-user loss is built from named noises, each given as the
standard deviation it adds to one arm's NE:

* ``user_sd``: the users' own effect on an arm, shared by its seeds (a user the arm suits);
* ``user_seed_sd``: user-level noise that differs from seed to seed (what a retrained model
  gets right for other users);
* ``seed_sd``: a seed's shift of the arm's NE as a whole (a luckier initialisation);
* ``world_sd``: a shift of the arm's NE per world, shared by its seeds (a search draw: knobs
  chosen once per variant and world).

An arm's NE is ``Σ loss / (Σ n · H(base rate))`` as in :mod:`gemkd.transfer.metrics.bootstrap`,
so the true NE difference of two arms is the difference of their ``effects`` exactly. Replicates
run along the task axis: one draw yields ``replicates`` independent runs at once (each "task"
its own users' labels, losses and noises), so the interval code vectorizes over them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from gemkd.transfer.metrics.bootstrap import WorldSums, ne_point
from gemkd.transfer.metrics.numerics import binary_entropy

BASE_RATE = 0.3
#: The default arms' true NE offsets: a placebo and a twin of KD (nulls against the baseline and
#: against KD), KD 0.01 below the baseline, and one variant 0.004 below KD (known effects).
EFFECTS = {"baseline": 0.0, "placebo": 0.0, "kd": -0.01, "twin": -0.01, "better": -0.014}
#: (variant, reference) pairs whose true difference is 0, and pairs with a known effect.
NULLS = (("placebo", "baseline"), ("twin", "kd"))
EFFECTS_KNOWN = (("kd", "baseline"), ("better", "kd"))
#: Noise mixes (NE sd per arm) the checks run: users dominate; seeds dominate ("seed noise large
#: next to user noise", where the percentile rule of earlier versions failed); both alike; users
#: plus a per-world effect the size of a search draw (0.004 NE; only meaningful with several
#: worlds: one world's own draw is its truth, not noise); seeds' noise large and nothing per
#: world (``agree``: world means that agree by chance, several worlds only).
class NoiseMix(TypedDict, total=False):
    """A mix's noise sds: :class:`Scenario`'s keyword arguments of those names."""

    user_sd: float
    user_seed_sd: float
    seed_sd: float
    world_sd: float


#: Large seed noise, no per-world effect, users' effect small, so the worlds'
#: means differ only by their seeds' noise and sometimes agree by chance (the A/A run's twin:
#: world means +0.00147, +0.00120, +0.00116 while one world's own standard error was 0.0084).
AGREE: NoiseMix = {"user_sd": 0.0005, "user_seed_sd": 0.0005, "seed_sd": 0.008}
NOISE_MIXES: dict[str, NoiseMix] = {
    "users": {"user_sd": 0.002, "user_seed_sd": 0.001, "seed_sd": 0.0005},
    "seeds": {"user_sd": 0.0005, "user_seed_sd": 0.0005, "seed_sd": 0.003},
    "balanced": {"user_sd": 0.0015, "user_seed_sd": 0.001, "seed_sd": 0.0015},
    "search": {"user_sd": 0.002, "user_seed_sd": 0.001, "seed_sd": 0.0005, "world_sd": 0.004},
    "agree": AGREE,
}
TEACHER = "gem"
#: The NE offset of the simulated teacher against the baseline: far better, so TR is defined.
TEACHER_EFFECT = -0.05


@dataclass(frozen=True)
class Scenario:
    """One run shape and its noises (NE units); ``effects`` maps each student variant to its
    true NE offset (0 for all: an A/A null)."""

    name: str
    worlds: int
    seeds: int
    users: int = 300
    impressions: float = 20.0
    user_sd: float = 0.002
    user_seed_sd: float = 0.001
    seed_sd: float = 0.0005
    world_sd: float = 0.0
    effects: dict[str, float] = field(default_factory=lambda: dict(EFFECTS))

    def truth(self, variant: str, reference: str) -> float:
        """The true ``NE(reference) − NE(variant)`` (a positive value: variant is better)."""
        return self.effects[reference] - self.effects[variant]


@dataclass(frozen=True, eq=False)
class SimWorld:
    """One world's arms: ``students[i]`` is arm i's (variant, seed), the teacher is the last."""

    world: int
    students: list[tuple[str, int]]
    teachers: list[str]
    sums: WorldSums


def draw_world(scenario: Scenario, world: int, replicates: int,
               rng: np.random.Generator) -> SimWorld:
    """One world of ``replicates`` independent runs (along the task axis)."""
    u, r = scenario.users, replicates
    n = 1.0 + rng.poisson(scenario.impressions - 1.0, size=(u, r)).astype(np.float64)
    pos = rng.binomial(n.astype(np.int64), BASE_RATE).astype(np.float64)
    total = n.sum(axis=0)                                  # [R]
    spread = total / np.sqrt((n * n).sum(axis=0))          # NE sd per unit of per-user z
    h = float(binary_entropy(BASE_RATE))
    difficulty = 1.0 + 0.3 * rng.standard_normal((u, r))   # shared by every arm: cancels
    variants = list(scenario.effects)
    students = [(v, s) for v in variants for s in range(scenario.seeds)]
    loss = np.empty((len(students) + 1, u, r))
    for v, variant in enumerate(variants):
        shift = scenario.effects[variant] + scenario.world_sd * rng.standard_normal(r)
        own = scenario.user_sd * spread * rng.standard_normal((u, r))
        for s in range(scenario.seeds):
            seed_shift = scenario.seed_sd * rng.standard_normal(r)
            noise = scenario.user_seed_sd * spread * rng.standard_normal((u, r))
            per_user = difficulty + shift + seed_shift + own + noise
            loss[v * scenario.seeds + s] = h * n * per_user
    loss[-1] = h * n * (difficulty + TEACHER_EFFECT)
    sums = WorldSums(user=np.arange(u), domain=np.zeros(u, dtype=np.int64), loss=loss, n=n,
                     pos=pos, base_rate=np.full(r, BASE_RATE), n_domains=1)
    return SimWorld(world, students, [TEACHER], sums)


def draw_run(scenario: Scenario, replicates: int, seed: int = 0) -> list[SimWorld]:
    """Every world of a scenario (``replicates`` runs each), reproducible from ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, _key(scenario.name)]))
    return [draw_world(scenario, w, replicates, rng) for w in range(scenario.worlds)]


def _key(name: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(name)) % 2**32


def seed_values(worlds: list[SimWorld], variant: str, reference: str) -> np.ndarray:
    """Each world's paired per-seed ``NE(reference) − NE(variant)`` on the whole domain
    ``[W, S, R]`` (R the replicates): what a world's own standard error is made of."""
    out = []
    for w in worlds:
        ne = ne_point(w.sums)[:, 0]  # [A, R]: every arm's NE over all domains
        arm = {key: i for i, key in enumerate(w.students)}
        seeds = sorted({s for _, s in w.students})
        out.append([ne[arm[reference, s]] - ne[arm[variant, s]] for s in seeds])
    return np.asarray(out)


def rate_se(rate: float, n: int) -> float:
    """The Monte-Carlo standard error of a rate over ``n`` independent replicates."""
    return math.sqrt(max(rate * (1 - rate), 1e-12) / n)


@dataclass(frozen=True)
class Rates:
    """How ``n`` intervals sat against the truth: the share entirely above it and entirely
    below it (for a null, a false verdict on that side), and the share of p-values ≤ 1 %."""

    n: int
    above: float
    below: float
    p_at_1pct: float = math.nan

    @property
    def miss(self) -> float:
        return self.above + self.below

    @property
    def coverage(self) -> float:
        return 1.0 - self.miss


def score(lo: np.ndarray, hi: np.ndarray, truth: float,
          p: np.ndarray | None = None) -> Rates:
    """Rates of intervals ``[lo, hi]`` (nan counts as holding the truth: no verdict)."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    pv = None if p is None else np.asarray(p, np.float64)
    small = math.nan if pv is None or np.isnan(pv).all() else float(np.mean(pv <= 0.01))
    return Rates(lo.size, float(np.mean(lo > truth)), float(np.mean(hi < truth)), small)
