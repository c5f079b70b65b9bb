"""A hand-built run directory with per-user evaluation files (``clusters/``): synthetic
per-example predictions of every arm, scored once by gemkd.transfer.metrics.RankingMetrics (the
results.csv the runner writes) and once summed per (user, domain) cluster (the files)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
import yaml

from gemkd.transfer.metrics import RankingMetrics

TASKS = ["click", "conversion"]
DOMAINS = ["d0", "d1"]
#: per-example logit noise of each arm: less noise = lower NE (a bigger ΔNE)
NOISE = {"baseline": 1.6, "kd": 0.9, "kd_aux": 0.5, "kd_repr": 0.9}
TEACHER_NOISE = 0.3
BASE_RATES = {"click": 0.3, "conversion": None}  # conversion: the evaluation labels' own mean


def world_data(world: int, users: int, per_user: int) -> dict[str, np.ndarray]:
    """One world's evaluation examples: users with a strong shared effect, two domains."""
    rng = np.random.default_rng([world, 99])
    n = users * per_user
    user = np.repeat(np.arange(users) * 7 + 3, per_user)  # ids need not be 0..U-1
    domain = rng.integers(0, len(DOMAINS), n)
    effect = np.repeat(rng.normal(0.0, 1.0, users), per_user)
    truth = np.stack([-0.8 + effect + rng.normal(0, 0.5, n),
                      -1.5 + 0.5 * effect + rng.normal(0, 0.5, n)], axis=1)
    labels = (rng.random((n, 2)) < 1 / (1 + np.exp(-truth))).astype(float)
    mask = np.ones((n, 2), dtype=bool)
    mask[:, 1] = rng.random(n) < 0.6  # conversion labelled on 60 % of rows
    return {"user": user, "domain": domain, "truth": truth, "labels": labels, "mask": mask}


def arm_logits(data: dict[str, np.ndarray], world: int, name: str, seed: int, noise: float
               ) -> np.ndarray:
    rng = np.random.default_rng([world, seed, sum(map(ord, name))])
    return data["truth"] + rng.normal(0.0, noise, data["truth"].shape)


def metrics(data: dict[str, np.ndarray], logits: np.ndarray) -> dict[str, float]:
    m = RankingMetrics(TASKS, len(DOMAINS), DOMAINS, base_rates=BASE_RATES)
    m.update(torch.from_numpy(logits), torch.from_numpy(data["labels"]),
             torch.from_numpy(data["domain"]), torch.from_numpy(data["mask"]))
    return m.compute()


def save_clusters(path: Path, data: dict[str, np.ndarray], logits: np.ndarray) -> None:
    """The per-(user, domain) sums in gemkd.transfer.metrics.clusters' file format."""
    w = data["mask"].astype(float)
    y = np.where(data["mask"], data["labels"], 0.0)
    loss = F.binary_cross_entropy_with_logits(torch.from_numpy(logits), torch.from_numpy(y),
                                              reduction="none").numpy() * w
    keys = np.stack([data["user"], data["domain"]], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)

    def total(values: np.ndarray) -> np.ndarray:
        out = np.zeros((len(uniq), values.shape[1]))
        np.add.at(out, inverse, values)
        return out

    path.parent.mkdir(parents=True, exist_ok=True)
    rates = np.array([np.nan if BASE_RATES[t] is None else BASE_RATES[t] for t in TASKS])
    np.savez(path, user_id=uniq[:, 0], domain=uniq[:, 1], loss=total(loss), n=total(w),
             pos=total(y * w), tasks=np.array(TASKS), domains=np.array(DOMAINS), base_rate=rates)


def derived(df: pd.DataFrame) -> pd.DataFrame:
    """ne_baseline, ΔNE, TR and efficiency vs KD of one world's rows, paired on seed (as the
    runner's results.csv has them)."""
    keys = ["seed", "domain", "task", "teacher_lag_days"]
    base = df[df["variant"] == "baseline"][[*keys, "ne"]].rename(columns={"ne": "ne_baseline"})
    df = df.merge(base, on=keys, how="left")
    df["delta_ne"] = df["ne_baseline"] - df["ne"]
    df["transfer_ratio"] = df["delta_ne"] / (df["ne_baseline"] - df["ne_teacher"])
    kd = df[df["variant"] == "kd"][[*keys, "delta_ne"]].rename(columns={"delta_ne": "kd"})
    df = df.merge(kd, on=keys, how="left")
    df["efficiency_vs_kd"] = (df["delta_ne"] / df["kd"]).where(df["kd"] > 0)
    return df.drop(columns=["kd"])


def make_cluster_run(root: Path, worlds=(0,), lags=(0,), seeds=(0, 1, 2),
                     noise: dict[str, float] = NOISE, users: int = 300, per_user: int = 8,
                     samples: int = 200, world_column: bool = True,
                     world_noise: dict[int, dict[str, float]] | None = None,
                     teacher_noise: float = TEACHER_NOISE) -> Path:
    """results.csv, spec.yaml and clusters/ of a run; ``world_noise[w]`` overrides ``noise``
    in world w (a variant that is better in one world only); ``teacher_noise`` above the
    baseline's makes a teacher worse than the labels-only student."""
    root.mkdir(parents=True, exist_ok=True)
    frames = []
    for world in worlds:
        data = world_data(world, users, per_user)
        oracle = metrics(data, data["truth"])
        rows = []
        for lag in lags:
            folder = root / "clusters" / f"world={world}" / f"lag={lag}"
            teacher_logits = arm_logits(data, world, f"teacher{lag}", 0, teacher_noise + lag / 10)
            teacher = metrics(data, teacher_logits)
            save_clusters(folder / "teacher__gem.npz", data, teacher_logits)
            for variant, sigma in noise.items():
                sigma = (world_noise or {}).get(world, {}).get(variant, sigma)
                for seed in seeds:
                    logits = arm_logits(data, world, f"{variant}{lag}", seed, sigma)
                    save_clusters(folder / f"{variant}__seed{seed}.npz", data, logits)
                    m = metrics(data, logits)
                    for task in TASKS:
                        for domain in [*DOMAINS, "all"]:
                            key = f"{task}/{domain}"
                            rows.append({
                                "variant": variant, "seed": seed, "world": world,
                                "domain": domain,
                                "task": task, "teacher_lag_days": lag, "ne": m[f"ne/{key}"],
                                "auc": m[f"auc/{key}"], "calibration": m[f"calibration/{key}"],
                                "ne_teacher": teacher[f"ne/{key}"],
                                "auc_teacher": teacher[f"auc/{key}"],
                                "calibration_teacher": teacher[f"calibration/{key}"],
                                "ne_source": teacher[f"ne/{key}"],
                                "ne_oracle": oracle[f"ne/{key}"], "ne_feature_oracle": np.nan,
                                "train_seconds": 1.0, "examples_per_second": 1e5})
        frames.append(derived(pd.DataFrame(rows)))
    results = pd.concat(frames, ignore_index=True)
    if not world_column:
        results = results.drop(columns=["world"])
    results.to_csv(root / "results.csv", index=False)
    (root / "spec.yaml").write_text(yaml.safe_dump({
        "name": "cluster-run", "seeds": list(seeds), "variants": list(noise),
        "teacher_lag_days": list(lags), "data": {"source": "synthetic", "seeds": list(worlds)},
        "bootstrap": {"samples": samples, "seed": 0}}))
    return root
