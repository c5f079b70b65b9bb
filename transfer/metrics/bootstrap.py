"""Paired, user-level (cluster) bootstrap of NE, and the training seeds' resampling (DESIGN §6).

Why: a user's impressions are correlated, so resampling single examples understates how much an
evaluation's NE would move on other users; the training seeds and the world that was drawn add
their own noise, and "2 std over 3 seeds on one world" saw none of the first and last. Within a
world, a replicate draws its evaluation users (every cluster of a user moves with it) and its
training seeds. All arms of a world (each variant × seed,
the teacher) get the same user draw and all variants the same seed draw, so a difference between
arms keeps only the noise that does not cancel (paired).

The report reads only the user level from here (one world's users resampled, every arm and seed
at once: :mod:`gemkd.transfer.metrics.contrasts` turns it into the users' variance, with the
degrees of freedom of the level that has few units). The seed resampling and the percentile
interval serve the teacher-aging study and the rule of earlier versions, kept for comparison in
benchmarks/percentile_rule.py (with the world level, which nothing else draws): a percentile
interval over 3 top-level units undercovers.

Everything works on per-cluster sums (log loss, present labels, positives), so NE for every
replicate of a world is one weighted sum — a matrix product, no Python loop over replicates.
Axis names used below: B replicates, A arms, C clusters, U users, D domains, G = D + 1 domain
groups (each domain, then all domains), T tasks, S seeds, W worlds.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from gemkd.transfer.metrics.numerics import binary_entropy

#: Elements of a [b, C] weight block held at once: bounds memory for any number of users.
_BLOCK = 1 << 23


@dataclass(frozen=True, eq=False)
class WorldSums:
    """One world's evaluation as per-cluster sums, rows paired across arms.

    ``user [C]``: the cluster's user (any integer ids; a user's clusters are resampled together);
    ``domain [C]``: int in ``[0, n_domains)``; ``loss [A, C, T]``: each arm's summed binary log
    loss in nats; ``n``, ``pos [C, T]``: present labels and positives — one evaluation set, so the
    same for every arm; ``base_rate [T]``: the training p̄ NE divides by (nan: the evaluation
    labels' own mean of the same domain group, recomputed per replicate).
    """

    user: np.ndarray
    domain: np.ndarray
    loss: np.ndarray
    n: np.ndarray
    pos: np.ndarray
    base_rate: np.ndarray
    n_domains: int
    _rows: list[np.ndarray] = field(init=False, repr=False)
    _blocks: list[np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        a, c, t = self.loss.shape
        if self.user.shape != (c,) or self.domain.shape != (c,):
            raise ValueError(f"user and domain must be [C={c}], got {self.user.shape} and "
                             f"{self.domain.shape}")
        if self.n.shape != (c, t) or self.pos.shape != (c, t):
            raise ValueError(f"n and pos must be [C={c}, T={t}], got {self.n.shape}, "
                             f"{self.pos.shape}")
        if self.base_rate.shape != (t,):
            raise ValueError(f"base_rate must be [T={t}], got {self.base_rate.shape}")
        if c and (self.domain.min() < 0 or self.domain.max() >= self.n_domains):
            raise ValueError(f"domain ids must lie in [0, {self.n_domains})")
        # per domain: the clusters' rows of [loss of every arm | n | pos], [C_d, A·T + 2T]
        rows = [np.flatnonzero(self.domain == d) for d in range(self.n_domains)]
        blocks = [np.concatenate([self.loss[:, r, :].transpose(1, 0, 2).reshape(len(r), a * t),
                                  self.n[r], self.pos[r]], axis=1) for r in rows]
        object.__setattr__(self, "_rows", rows)
        object.__setattr__(self, "_blocks", blocks)

    @property
    def n_arms(self) -> int:
        return self.loss.shape[0]

    @property
    def n_tasks(self) -> int:
        return self.loss.shape[2]


def rng_for(seed: int, *key: int) -> np.random.Generator:
    """An independent stream per (seed, key…): e.g. users of world 7 vs seeds of world 7, so
    adding a variant or a lag never changes another stream's draws."""
    return np.random.default_rng(np.random.SeedSequence([seed % 2**64,
                                                         *(k % 2**64 for k in key)]))


def resample_weights(user: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """``[samples, C]`` float64: how many times each cluster's user was drawn when the U users
    are drawn U times with replacement (multinomial counts). Clusters of one user share it."""
    _, index = np.unique(user, return_inverse=True)
    index = index.reshape(-1)
    n_users = int(index.max()) + 1 if index.size else 0
    if n_users == 0:
        return np.zeros((samples, 0))
    draws = rng.integers(0, n_users, size=(samples, n_users))
    draws += n_users * np.arange(samples)[:, None]
    counts = np.bincount(draws.ravel(), minlength=samples * n_users).reshape(samples, n_users)
    return counts[:, index].astype(np.float64)


def _ne(world: WorldSums, weights: np.ndarray) -> np.ndarray:
    """NE ``[b, A, G, T]`` of every arm under cluster ``weights [b, C]``."""
    a, t = world.n_arms, world.n_tasks
    b = weights.shape[0]
    sums = np.zeros((b, world.n_domains + 1, a * t + 2 * t))
    for d, (rows, block) in enumerate(zip(world._rows, world._blocks, strict=True)):
        sums[:, d] = weights[:, rows] @ block
    sums[:, -1] = sums[:, :-1].sum(axis=1)
    loss = sums[..., : a * t].reshape(b, -1, a, t).transpose(0, 2, 1, 3)  # [b, A, G, T]
    n, pos = sums[..., a * t: a * t + t], sums[..., a * t + t:]           # [b, G, T]
    with np.errstate(divide="ignore", invalid="ignore"):
        own = pos / n
    p = np.where(np.isnan(world.base_rate), own, world.base_rate)
    h = binary_entropy(np.nan_to_num(p, nan=0.0))
    ok = (n > 0) & (h > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ne = loss / np.where(ok, n, 1.0)[:, None] / np.where(ok, h, 1.0)[:, None]
    return np.where(ok[:, None], ne, np.nan)


def ne_point(world: WorldSums) -> np.ndarray:
    """NE ``[A, G, T]`` of every arm on the evaluation as it is (every user once)."""
    return _ne(world, np.ones((1, world.user.shape[0])))[0]


def ne_replicates(world: WorldSums, samples: int, rng: np.random.Generator) -> np.ndarray:
    """NE ``[samples, A, G, T]`` of every arm, one user resample per replicate shared by all
    arms (paired). Replicates are drawn in blocks that bound memory, not one at a time."""
    c = world.user.shape[0]
    out = np.empty((samples, world.n_arms, world.n_domains + 1, world.n_tasks))
    step = max(1, _BLOCK // max(c, 1))
    for start in range(0, samples, step):
        stop = min(samples, start + step)
        out[start:stop] = _ne(world, resample_weights(world.user, stop - start, rng))
    return out


def seed_weights(n_seeds: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """``[samples, S]`` float64: how many times each seed was drawn (S draws with replacement)."""
    draws = rng.integers(0, n_seeds, size=(samples, n_seeds))
    draws += n_seeds * np.arange(samples)[:, None]
    counts = np.bincount(draws.ravel(), minlength=samples * n_seeds)
    return counts.reshape(samples, n_seeds).astype(np.float64)


def seed_mean(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted mean over seeds: ``values [B, S, ...]``, ``weights [B, S]`` → ``[B, ...]``.
    A missing (nan) seed is left out; nan where no drawn seed has a value."""
    ok = np.isfinite(values)
    w = weights.reshape(weights.shape + (1,) * (values.ndim - 2)) * ok
    total = (np.where(ok, values, 0.0) * w).sum(axis=1)
    count = w.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, total / count, np.nan)


def interval(replicates: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over axis 0. Undefined replicates (nan, ±inf: e.g. an empty domain
    in a resample) are left out while they are fewer than the tail ``(1 - level) / 2``; beyond
    that the tail is unknown and the interval is nan."""
    x = np.asarray(replicates, dtype=np.float64)
    finite = np.isfinite(x)
    tail = (1 - level) / 2
    known = finite.mean(axis=0) >= 1 - tail if x.shape[0] else np.zeros(x.shape[1:], bool)
    if finite.all():
        lo, hi = np.percentile(x, [100 * tail, 100 * (1 - tail)], axis=0)
    else:
        with warnings.catch_warnings():  # an all-nan column: its nan is masked below anyway
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = np.nanpercentile(np.where(finite, x, np.nan),
                                      [100 * tail, 100 * (1 - tail)], axis=0)
    return np.where(known, lo, np.nan), np.where(known, hi, np.nan)
