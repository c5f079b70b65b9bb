"""The aging study of ``studies/teacher_aging.py``: trained checkpoints → per-row outputs on
the same evaluation days → NE, AUC and calibration per model × age × domain group × task with
intervals (a user-level cluster bootstrap nested with one over seeds,
``gemkd.transfer.metrics.bootstrap``), the least-squares slope against age and the paired
differences. Kept apart from training so any checkpoints (a streaming teacher's daily ones, a
synthetic world's) can be aged the same way; ``studies/aging_report.py`` renders it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from gemkd.transfer.metrics import binary_auc
from gemkd.transfer.metrics.bootstrap import (
    interval,
    resample_weights,
    rng_for,
    seed_mean,
    seed_weights,
)
from gemkd.transfer.metrics.numerics import log_loss_from_logits, ne_from_mean_loss

#: the domain group of every row
ALL = "all"


# ---- evaluation of one checkpoint ---------------------------------------------------------------

@dataclass(frozen=True)
class EvalRows:
    """One model's outputs on the evaluation rows: ``logits``/``labels`` ``[N, T]`` (label nan =
    absent), ``user``, ``domain``, ``example_id`` ``[N]``. Rows of every model evaluated on the
    same days come in the same order (checked by ``example_id``), which pairs them."""

    logits: np.ndarray
    labels: np.ndarray
    user: np.ndarray
    domain: np.ndarray
    example_id: np.ndarray
    tasks: tuple[str, ...]
    domains: tuple[str, ...]


@torch.inference_mode()
def evaluate_rows(ckpt: str | Path, data: str | Path, days: tuple[int, int], *,
                  batch_size: int = 4096) -> EvalRows:
    """Per-row logits of the teacher at ``ckpt`` (its run's ``config.yaml`` beside
    ``checkpoints/``) on ``days`` of ``data``: what a user bootstrap resamples, kept apart from
    training so that any checkpoint can be aged."""
    from gemkd.experiments.teacher.teacher_config import load_teacher
    from gemkd.transfer.data.dataset_reader import DatasetReader

    teacher = load_teacher(ckpt, data)
    model, schema = teacher.model.eval(), teacher.schema
    parts: list[tuple[np.ndarray, ...]] = []
    for batch in DatasetReader(data, days=days, batch_size=batch_size,
                               max_seq_len=teacher.cfg.max_seq_len, oracle=False):
        parts.append((model(batch).logits.double().numpy(), batch.labels.double().numpy(),
                      batch.user_id.numpy(), batch.domain.numpy(), batch.example_id.numpy()))
    logits, labels, user, domain, example_id = (np.concatenate(c)
                                                for c in zip(*parts, strict=True))
    return EvalRows(logits, labels, user, domain, example_id, tasks=tuple(schema.tasks),
                    domains=tuple(schema.domains))


@dataclass(frozen=True)
class Run:
    """One trained model at one age: ``base_rates[group][task]`` are its training window's
    positive rates (NE's p̄) for each domain group (``"all"`` or a domain name)."""

    model: str
    age: float
    seed: int
    rows: EvalRows
    base_rates: dict[str, dict[str, float]]


def window_base_rates(data: str | Path, days: tuple[int, int], tasks: Sequence[str],
                      groups: Iterable[str]) -> dict[str, dict[str, float]]:
    """The training window's positive rate per group (``"all"``: every domain) and task."""
    from gemkd.transfer.training import training_base_rates

    return {g: training_base_rates(data, days, list(tasks), None if g == ALL else [g])
            for g in groups}


# ---- slopes -------------------------------------------------------------------------------------

def ls_slope(x: Sequence[float], y: np.ndarray) -> np.ndarray:
    """Least-squares slope of ``y [..., K]`` against ``x [K]`` along the last axis; nan where any
    of the K values is nan (a slope over fewer points would not be the same fit)."""
    xa = np.asarray(x, dtype=np.float64)
    if xa.size < 2 or np.ptp(xa) == 0:
        return np.full(np.shape(y)[:-1], np.nan)
    xc = xa - xa.mean()
    y = np.asarray(y, dtype=np.float64)
    return ((y - y.mean(axis=-1, keepdims=True)) * xc).sum(axis=-1) / (xc ** 2).sum()


def slope_with_interval(x: Sequence[float], point: np.ndarray, replicates: np.ndarray,
                        level: float = 0.95) -> tuple[float, float, float]:
    """Slope of ``point [K]`` against ``x`` and the percentile interval of the slopes of
    ``replicates [B, K]`` (each a bootstrap replicate of the same K values)."""
    lo, hi = interval(ls_slope(x, replicates), level)
    return float(ls_slope(x, point)), float(lo), float(hi)


# ---- the study: table and slopes ----------------------------------------------------------------

def _check_paired(runs: Sequence[Run]) -> EvalRows:
    first = runs[0].rows
    for r in runs[1:]:
        if (r.rows.example_id.shape != first.example_id.shape
                or not np.array_equal(r.rows.example_id, first.example_id)):
            raise ValueError(f"run {r.model}/{r.age}/{r.seed} was evaluated on other rows than "
                             f"{runs[0].model}/{runs[0].age}/{runs[0].seed}: not paired")
        if r.rows.tasks != first.tasks:
            raise ValueError("runs disagree on the tasks")
    return first


def _metrics(sums: np.ndarray, n_arms: int, n_tasks: int, rates: np.ndarray
             ) -> dict[str, np.ndarray]:
    """NE (training rate), NE (evaluation rate) and calibration ``[b, A, T]`` from the weighted
    cluster sums ``[b, 2·A·T + 2T]`` = [loss of each arm | Σp of each arm | n | pos]."""
    a, t = n_arms, n_tasks
    b = sums.shape[0]
    loss = sums[:, : a * t].reshape(b, a, t)
    psum = sums[:, a * t: 2 * a * t].reshape(b, a, t)
    n, pos = sums[:, None, 2 * a * t: 2 * a * t + t], sums[:, None, 2 * a * t + t:]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_loss = np.where(n > 0, loss / n, np.nan)
        # nan where a rate is 0, 1 or nan (NE undefined)
        return {"ne": ne_from_mean_loss(mean_loss, rates[None]),
                "ne_eval": ne_from_mean_loss(mean_loss, np.where(n > 0, pos / n, np.nan)),
                "calibration": np.where(pos > 0, psum / pos, np.nan)}


def aging_study(runs: Sequence[Run], *, groups: Sequence[str] = (ALL,), samples: int = 200,
                seed: int = 0, level: float = 0.95, control: str | None = "mlp",
                levels: bool = False) -> tuple[pd.DataFrame, ...]:
    """``(curve, slopes)`` for ``runs`` evaluated on the same rows.

    ``curve``: one row per model × age × group × task: NE (mean and std over seeds, and the
    interval of a user-level cluster bootstrap of the rows nested with a bootstrap over seeds:
    every arm gets the same user draw and every (model, age) the same seed draw), ``ne_eval``
    (against the evaluation rows' own rate), AUC (mean, std over seeds), calibration (mean and
    interval), both base rates. ``slopes``: per model × group × task × metric, the least-squares
    slope against age and its interval from the same replicates; with ``control``, also each
    other model's slope minus the control's (paired: the same replicates). With ``levels``, a
    third table: each other model minus the control at every age (``diff``, its interval from
    the same replicates): e.g. GEM base − GEM small on the same window."""
    if not runs:
        raise ValueError("no runs")
    rows = _check_paired(runs)
    tasks, t = list(rows.tasks), len(rows.tasks)
    models = list(dict.fromkeys(r.model for r in runs))
    ages = sorted({float(r.age) for r in runs})
    seeds = sorted({r.seed for r in runs})
    arm = {(r.model, float(r.age), r.seed): i for i, r in enumerate(runs)}
    if len(arm) != len(runs):
        raise ValueError("two runs share model, age and seed")
    a = len(runs)
    # (user, domain) clusters: a user's rows move together in a resample
    keys, inverse = np.unique(np.stack([rows.user, rows.domain], 1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    c_user, c_domain = keys[:, 0], keys[:, 1]
    present = np.isfinite(rows.labels)
    y = np.where(present, rows.labels, 0.0)

    def per_cluster(values: np.ndarray) -> np.ndarray:  # [N, K] → [C, K]
        return np.stack([np.bincount(inverse, weights=values[:, k], minlength=len(keys))
                         for k in range(values.shape[1])], axis=1)

    cols = []
    for r in runs:
        x = r.rows.logits
        loss = log_loss_from_logits(y, x)
        cols.append(per_cluster(np.where(present, loss, 0.0)))
    for r in runs:
        p = 0.5 * (1 + np.tanh(r.rows.logits / 2))  # sigmoid, no overflow
        cols.append(per_cluster(np.where(present, p, 0.0)))
    cols += [per_cluster(present.astype(np.float64)), per_cluster(y)]
    block = np.concatenate(cols, axis=1)                            # [C, 2·A·T + 2T]
    user_w = resample_weights(c_user, samples, rng_for(seed, 1))    # [B, C], shared by all arms
    seed_w = seed_weights(len(seeds), samples, rng_for(seed, 2))    # [B, S], shared by all cells

    curve_rows: list[dict[str, Any]] = []
    slope_rows: list[dict[str, Any]] = []
    level_rows: list[dict[str, Any]] = []
    for g in groups:
        mask = np.ones(len(keys), bool) if g == ALL else c_domain == _domain_id(rows, g)
        rates = np.array([[r.base_rates[g][k] for k in tasks] for r in runs])  # [A, T]
        point = _metrics(block[mask].sum(0, keepdims=True), a, t, rates)
        reps = _metrics(user_w[:, mask] @ block[mask], a, t, rates)
        row_mask = mask[inverse]
        auc = np.array([[_auc(r.rows.logits[row_mask & present[:, k], k],
                              y[row_mask & present[:, k], k]) for k in range(t)]
                        for r in runs])                                 # [A, T]
        n_pos = block[mask].sum(0)[2 * a * t:]
        eval_rate = n_pos[t:] / np.maximum(n_pos[:t], 1)

        def grid(values: np.ndarray) -> np.ndarray:  # [b, A, T] → [b, S, M, K, T] (nan: absent)
            out = np.full((values.shape[0], len(seeds), len(models), len(ages), t), np.nan)
            for (m, ag, s), i in arm.items():
                out[:, seeds.index(s), models.index(m), ages.index(ag)] = values[:, i]
            return out

        cell: dict[str, dict[str, np.ndarray]] = {}
        for metric in ("ne", "ne_eval", "calibration"):
            per_seed = grid(point[metric])[0]                           # [S, M, K, T]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(per_seed, axis=0)
                std = np.nanstd(per_seed, axis=0, ddof=1) if len(seeds) > 1 else \
                    np.full(mean.shape, np.nan)
            rep = seed_mean(grid(reps[metric]), seed_w)                 # [B, M, K, T]
            lo, hi = interval(rep, level)
            cell[metric] = {"mean": mean, "std": std, "lo": lo, "hi": hi, "rep": rep}
        auc_seed = grid(auc[None])[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            auc_mean = np.nanmean(auc_seed, axis=0)
            auc_std = np.nanstd(auc_seed, axis=0, ddof=1) if len(seeds) > 1 else \
                np.full(auc_mean.shape, np.nan)
        n_seeds = (~np.isnan(grid(point["ne"])[0])).sum(axis=0)       # [M, K, T]
        train_rate = grid(rates[None])[0]
        for mi, m in enumerate(models):
            for ki, ag in enumerate(ages):
                for ti, task in enumerate(tasks):
                    if n_seeds[mi, ki, ti] == 0:
                        continue
                    row: dict[str, Any] = {"model": m, "age": ag, "group": g, "task": task,
                                           "n_seeds": int(n_seeds[mi, ki, ti])}
                    for metric, v in cell.items():
                        row[metric] = float(v["mean"][mi, ki, ti])
                        if metric != "calibration":
                            row[f"{metric}_std"] = float(v["std"][mi, ki, ti])
                        row[f"{metric}_lo"] = float(v["lo"][mi, ki, ti])
                        row[f"{metric}_hi"] = float(v["hi"][mi, ki, ti])
                    row["auc"] = float(auc_mean[mi, ki, ti])
                    row["auc_std"] = float(auc_std[mi, ki, ti])
                    row["base_rate_train"] = float(np.nanmean(train_rate[:, mi, ki, ti]))
                    row["base_rate_eval"] = float(eval_rate[ti])
                    curve_rows.append(row)
        for metric, v in cell.items():
            for ti, task in enumerate(tasks):
                for mi, m in enumerate(models):
                    s, s_lo, s_hi = slope_with_interval(ages, v["mean"][mi, :, ti],
                                                        v["rep"][:, mi, :, ti], level)
                    slope_rows.append({"model": m, "group": g, "task": task, "metric": metric,
                                       "slope": s, "lo": s_lo, "hi": s_hi})
                if control in models:
                    ci = models.index(control)
                    for mi, m in enumerate(models):
                        if mi == ci:
                            continue
                        s, s_lo, s_hi = slope_with_interval(
                            ages, v["mean"][mi, :, ti] - v["mean"][ci, :, ti],
                            v["rep"][:, mi, :, ti] - v["rep"][:, ci, :, ti], level)
                        slope_rows.append({"model": f"{m} − {control}", "group": g,
                                           "task": task, "metric": metric, "slope": s,
                                           "lo": s_lo, "hi": s_hi})
                        for ki, ag in enumerate(ages):
                            d = v["mean"][mi, ki, ti] - v["mean"][ci, ki, ti]
                            if not np.isfinite(d):
                                continue
                            lo, hi = interval(v["rep"][:, mi, ki, ti] - v["rep"][:, ci, ki, ti],
                                              level)
                            level_rows.append({"model": f"{m} − {control}", "age": ag,
                                               "group": g, "task": task, "metric": metric,
                                               "diff": float(d), "lo": float(lo),
                                               "hi": float(hi)})
    out = (pd.DataFrame(curve_rows), pd.DataFrame(slope_rows))
    return (*out, pd.DataFrame(level_rows)) if levels else out


def aging_curve(runs: Sequence[Run], **kwargs: Any) -> pd.DataFrame:
    """The table of :func:`aging_study` alone (model × age × group × task)."""
    return aging_study(runs, **kwargs)[0]


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
    return float(binary_auc(torch.from_numpy(scores), torch.from_numpy(labels)))


def _domain_id(rows: EvalRows, name: str) -> int:
    if name not in rows.domains:
        raise ValueError(f"unknown domain {name!r}; the dataset has {', '.join(rows.domains)}")
    return rows.domains.index(name)
