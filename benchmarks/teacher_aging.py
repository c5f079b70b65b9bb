"""Teacher aging on real logs: how fast does a teacher's NE rise with the age of its training
window? (docs/STALENESS.md)

    python benchmarks/teacher_aging.py --data DATASET_DIR [--window 4] [--ages 0 2 4 6]
        [--eval-days 12 14] [--seeds 0 1 2] [--models gem mlp] [--set KEY=VALUE ...]
        [--groups all tab_0] [--task click] [--bootstrap 200] [--threads 1]
        [--json OUT] [--markdown OUT] [--plot OUT.png] [--keep DIR]

Every model is trained on a window of ``--window`` days that ends ``age`` days before the first
evaluation day — ``[E0 − age − W, E0 − age)`` — and all are evaluated on the same days
``[E0, E1)``: the windows have equal length and differ only in age (DESIGN §6.1). Each age is
trained for ``gem`` (the teacher config, default ``small``) and ``mlp`` (``mlp_small`` with the
teacher's feature keys and trainer settings, as in ``benchmarks/teacher_ablation.py``) on the
same windows and seeds: the MLP is the control, so a teacher whose NE rises with age faster than
the MLP's has aged beyond "an older window is a worse window for any model".

Training is one fixed recipe for every window: ``max_epochs`` epochs (1 unless ``--set``), the
last kept, no validation days (any validation day would sit between the window and the
evaluation, or be an evaluation day). ``--set`` overrides trainer keys of both configs
(``max_seq_len=256``); ``model.KEY=V`` sets a GEM hyper-parameter (feature keys ``d``,
``max_history``… also reach the MLP), ``mlp.KEY=V`` an MLP one. With ``--keep DIR`` a finished
run of the same config and dataset is reused, so a rerun with other ``--ages`` or ``--groups``
only evaluates.

Reported per model × age × domain group × task: NE (mean ± std over seeds) with a 95 % interval
from a user-level (cluster) bootstrap of the evaluation rows combined with a bootstrap over seeds
(``gemkd.transfer.metrics.bootstrap``); AUC (mean ± std over seeds); calibration Σp / Σy with the
same interval. NE divides by the entropy of the *training window's* positive rate (the library's
convention; for a domain group, the window's rate on that domain's rows), so a window whose base
rate differs from the evaluation days' also moves NE: ``ne_eval`` (NE against the evaluation
rows' own rate, i.e. rescaled log loss) is reported beside it. The headline is the least-squares
slope of NE against age (NE per day of age) per model, its interval from the same replicates, and
the paired difference of slopes teacher − MLP.

:func:`evaluate_rows` (a trained checkpoint → per-row outputs on the evaluation days) and
:func:`aging_study` / :func:`aging_curve` (rows of many checkpoints → the table and the slopes)
are separate from training, so any set of checkpoints (a streaming teacher's daily ones, a
synthetic world's) can be aged the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import (  # noqa: E402
    add_common_args,
    apply_common_args,
    quiet_lightning,
    write_json,
)
from benchmarks.teacher_ablation import parse_overrides, variant_config  # noqa: E402
from gemkd.experiments.teacher_config import (  # noqa: E402
    TeacherTrainConfig,
    find_config,
    load_teacher_config,
)
from gemkd.transfer.metrics import binary_auc  # noqa: E402
from gemkd.transfer.metrics.bootstrap import (  # noqa: E402
    interval,
    resample_weights,
    rng_for,
    seed_mean,
    seed_weights,
)

#: benchmark model name → teacher_ablation variant
MODELS = {"gem": "full", "mlp": "mlp", "gem_base": "full"}  # gem_base: GEM of --base-config
DEFAULT_MODELS = ["gem", "mlp"]
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
    from gemkd.experiments.teacher_config import load_teacher
    from gemkd.transfer.data.reader import DatasetReader

    teacher = load_teacher(ckpt, data)
    model, schema = teacher.model.eval(), teacher.schema
    parts: list[tuple[np.ndarray, ...]] = []
    for batch in DatasetReader(data, days=days, batch_size=batch_size,
                               max_seq_len=teacher.cfg.max_seq_len, oracle=False):
        parts.append((model(batch).logits.double().numpy(), batch.labels.double().numpy(),
                      batch.user_id.numpy(), batch.domain.numpy(), batch.example_id.numpy()))
    cols = [np.concatenate(c) for c in zip(*parts, strict=True)]
    return EvalRows(*cols, tasks=tuple(schema.tasks), domains=tuple(schema.domains))


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
    x = np.asarray(x, dtype=np.float64)
    if x.size < 2 or np.ptp(x) == 0:
        return np.full(np.shape(y)[:-1], np.nan)
    xc = x - x.mean()
    y = np.asarray(y, dtype=np.float64)
    return ((y - y.mean(axis=-1, keepdims=True)) * xc).sum(axis=-1) / (xc ** 2).sum()


def slope_with_interval(x: Sequence[float], point: np.ndarray, replicates: np.ndarray,
                        level: float = 0.95) -> tuple[float, float, float]:
    """Slope of ``point [K]`` against ``x`` and the percentile interval of the slopes of
    ``replicates [B, K]`` (each a bootstrap replicate of the same K values)."""
    lo, hi = interval(ls_slope(x, replicates), level)
    return float(ls_slope(x, point)), float(lo), float(hi)


# ---- the study: table and slopes ----------------------------------------------------------------

def _entropy(p: np.ndarray) -> np.ndarray:
    inside = (p > 0) & (p < 1)
    q = np.where(inside, p, 0.5)
    return np.where(inside, -(q * np.log(q) + (1 - q) * np.log1p(-q)), np.nan)


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
        return {"ne": mean_loss / _entropy(rates)[None],
                "ne_eval": mean_loss / _entropy(np.where(n > 0, pos / n, np.nan)),
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
        loss = np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))  # BCE with logits
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
                    s, lo, hi = slope_with_interval(ages, v["mean"][mi, :, ti],
                                                    v["rep"][:, mi, :, ti], level)
                    slope_rows.append({"model": m, "group": g, "task": task, "metric": metric,
                                       "slope": s, "lo": lo, "hi": hi})
                if control in models:
                    ci = models.index(control)
                    for mi, m in enumerate(models):
                        if mi == ci:
                            continue
                        s, lo, hi = slope_with_interval(
                            ages, v["mean"][mi, :, ti] - v["mean"][ci, :, ti],
                            v["rep"][:, mi, :, ti] - v["rep"][:, ci, :, ti], level)
                        slope_rows.append({"model": f"{m} − {control}", "group": g,
                                           "task": task, "metric": metric, "slope": s,
                                           "lo": lo, "hi": hi})
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


# ---- output -------------------------------------------------------------------------------------

def markdown(curve: pd.DataFrame, slopes: pd.DataFrame, task: str, groups: Sequence[str],
             level: float = 0.95, unit: str = "day", levels: pd.DataFrame | None = None) -> str:
    """Per group: model × age → NE ± std [interval], NE (eval rate), AUC, calibration; then the
    slopes per day of age and the differences of slopes; with ``levels``, each model minus the
    control at every age."""
    pct = f"{100 * level:.0f} %"
    out: list[str] = []
    for g in groups:
        c = curve[(curve.group == g) & (curve.task == task)]
        if c.empty:
            continue
        out += [f"### {task}, domain {g}", "",
                f"| model | age ({unit}s) | seeds | NE ± std over seeds [{pct} interval] | "
                "NE vs eval rate | AUC ± std | calibration Σp/Σy [interval] | p̄ train | p̄ eval |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in c.itertuples():
            out.append(f"| {r.model} | {r.age:g} | {r.n_seeds} | {r.ne:.4f} ± {r.ne_std:.4f} "
                       f"[{r.ne_lo:.4f}, {r.ne_hi:.4f}] | {r.ne_eval:.4f} | "
                       f"{r.auc:.4f} ± {r.auc_std:.4f} | {r.calibration:.3f} "
                       f"[{r.calibration_lo:.3f}, {r.calibration_hi:.3f}] | "
                       f"{r.base_rate_train:.4f} | {r.base_rate_eval:.4f} |")
        s = slopes[(slopes.group == g) & (slopes.task == task)]
        if c["age"].nunique() < 2:  # one age: no slope to fit
            s = s.iloc[0:0]
        out += [] if s.empty else ["", f"Least-squares slope against age, per {unit} of age "
                                   f"[{pct} interval]:", "",
                f"| model | NE / {unit} | NE vs eval rate / {unit} | calibration / {unit} |",
                "|---|---:|---:|---:|"]
        for m in dict.fromkeys(s.model):
            cells = []
            for metric in ("ne", "ne_eval", "calibration"):
                r = s[(s.model == m) & (s.metric == metric)].iloc[0]
                cells.append(f"{r.slope:+.5f} [{r.lo:+.5f}, {r.hi:+.5f}]")
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        lv = (levels[(levels.group == g) & (levels.task == task)]
              if levels is not None and not levels.empty else None)
        if lv is not None and not lv.empty:
            out += ["", f"Paired difference at each age (the same users and seeds) "
                    f"[{pct} interval]; negative NE = the first model is better:", "",
                    f"| models | age ({unit}s) | NE | NE vs eval rate | calibration |",
                    "|---|---:|---:|---:|---:|"]
            for (m, ag), d in lv.groupby(["model", "age"], sort=False):
                cells = []
                for metric in ("ne", "ne_eval", "calibration"):
                    r = d[d.metric == metric].iloc[0]
                    cells.append(f"{r['diff']:+.5f} [{r['lo']:+.5f}, {r['hi']:+.5f}]")
                out.append(f"| {m} | {ag:g} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def plot(curve: pd.DataFrame, task: str, groups: Sequence[str], path: str | Path,
         title: str = "", unit: str = "day") -> None:
    """NE against age, one line per model, error bars = the bootstrap interval; one column per
    domain group, NE against the training window's rate above and the evaluation's below (a
    window with another base rate moves the first, not the second)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend

    fig = Figure(figsize=(5 * len(groups), 7.5), layout="constrained")
    axes = fig.subplots(2, len(groups), squeeze=False)
    rows = (("ne", "NE (training window's p̄)"), ("ne_eval", "NE (evaluation days' p̄)"))
    for (metric, what), line in zip(rows, axes, strict=True):
        for ax, g in zip(line, groups, strict=True):
            c = curve[(curve.group == g) & (curve.task == task)]
            for i, (m, d) in enumerate(c.groupby("model", sort=False)):
                x = d["age"].to_numpy() + 0.08 * (i - 0.5)  # a dodge: bars do not overlap
                y = d[metric].to_numpy()  # (d.ne would be DataFrame.ne, "not equal")
                err = np.stack([y - d[f"{metric}_lo"].to_numpy(),
                                d[f"{metric}_hi"].to_numpy() - y]).clip(min=0)
                ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=m)
            ax.set_xlabel(f"age of the training window ({unit}s before the evaluation)")
            ax.set_ylabel(f"{what}, {task}")
            ax.set_title(f"{title} {task}, domain {g}".strip())
            ax.grid(alpha=0.3)
            ax.legend()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


# ---- training the windows -----------------------------------------------------------------------

def build_configs(teacher_config: str, mlp_config: str, sets: list[str], accelerator: str,
                  base_config: str | None = None
                  ) -> tuple[TeacherTrainConfig, TeacherTrainConfig, TeacherTrainConfig | None]:
    """The teacher, MLP and (with ``base_config``) second GEM configs with ``--set`` applied
    (``model.K`` / ``mlp.K``: a model key of GEM / the MLP; trainer keys reach all three, the
    second GEM keeping its own model and recipe otherwise)."""
    values = parse_overrides(sets, "--set")
    gem_model = {k[6:]: v for k, v in values.items() if k.startswith("model.")}
    mlp_model = {k[4:]: v for k, v in values.items() if k.startswith("mlp.")}
    trainer = {"max_epochs": 1,  # one epoch was the best of 3 on both real logs (STALENESS.md)
               **{k: v for k, v in values.items() if not k.startswith(("model.", "mlp."))}}
    teacher = load_teacher_config(find_config(teacher_config, "teachers"),
                                  {**trainer, "accelerator": accelerator})
    mlp = load_teacher_config(find_config(mlp_config, "teachers"))
    teacher = dataclasses.replace(teacher, model={**teacher.model, **gem_model})
    mlp = dataclasses.replace(mlp, model={**mlp.model, **mlp_model})
    base = None if base_config is None else load_teacher_config(
        find_config(base_config, "teachers"), {**trainer, "accelerator": accelerator})
    return teacher, mlp, base


def window(age: int, width: int, eval_first: int) -> tuple[int, int]:
    """``[E0 − age − W, E0 − age)``: the window of ``width`` days ending ``age`` days before
    the first evaluation day."""
    return eval_first - age - width, eval_first - age


def train_window(model: str, teacher: TeacherTrainConfig, mlp: TeacherTrainConfig,
                 days: tuple[int, int], seed: int, data: Path, out: Path,
                 base: TeacherTrainConfig | None = None) -> tuple[Path, bool]:
    """Fit ``model`` (gem | mlp) on ``days`` with ``seed``: the checkpoint of its last epoch, and
    whether it was reused — a finished run in ``out`` with the same resolved config on the same
    dataset (``--keep``: a rerun with other ages or groups only evaluates)."""
    from gemkd.experiments.teacher_fit import fit_teacher

    if model == "gem_base" and base is None:
        raise ValueError("model gem_base needs the second GEM config (--base-config)")
    cfg = variant_config(MODELS[model], base if model == "gem_base" else teacher, mlp, seed)
    cfg = dataclasses.replace(cfg, name=f"{model}-{days[0]}-{days[1]}-s{seed}",
                              train_days=list(days), val_days=None, test_days=None,
                              select="last", patience=None)
    ckpt, marker = out / "checkpoints" / "last.ckpt", out / "aging_data.txt"
    if (ckpt.is_file() and marker.is_file() and marker.read_text() == str(data.resolve())
            and yaml.safe_load((out / "config.yaml").read_text()) == yaml.safe_load(
                yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))):
        return ckpt, True
    marker.unlink(missing_ok=True)
    ckpt = Path(fit_teacher(cfg, data, out, progress=False)["checkpoint"])
    marker.write_text(str(data.resolve()))
    return ckpt, False


def resolve_data(pattern: str) -> Path | None:
    """A dataset directory, or the first match of a glob (a run's cache: ``data-*/data``)."""
    hits = sorted(glob.glob(pattern))
    for hit in hits:
        if (Path(hit) / "schema.json").is_file():
            return Path(hit)
    return None


def day_spans(data: Path, days: Iterable[int]) -> dict[int, tuple[str, str]]:
    """First and last timestamp (UTC) of each day: what a "day" of age is in calendar time."""
    import datetime

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from gemkd.transfer.data.writer import day_path

    out = {}
    for d in days:
        ts = pq.read_table(day_path(data, d), columns=["ts"]).column("ts")
        lo, hi = pc.min(ts).as_py(), pc.max(ts).as_py()
        out[d] = tuple(datetime.datetime.fromtimestamp(v, datetime.UTC).strftime("%Y-%m-%d %H:%M")
                       for v in (lo, hi))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True,
                   help="a gemkd dataset directory (or a glob, e.g. runs/kuairand/cache/data-*/"
                        "data); absent: a message and exit 0")
    p.add_argument("--name", default="", help="a label for the titles (e.g. KuaiRand)")
    p.add_argument("--unit", default="day",
                   help="what one of the dataset's days is, for the labels (MovieLens: bucket)")
    p.add_argument("--window", type=int, default=4, help="days per training window")
    p.add_argument("--ages", type=int, nargs="+", default=[0, 2, 4, 6])
    p.add_argument("--eval-days", type=int, nargs=2, default=[12, 14], metavar=("FIRST", "END"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=DEFAULT_MODELS,
                   help="gem (--teacher-config), mlp (the control), gem_base (--base-config: "
                        "a second GEM size on the same windows)")
    p.add_argument("--base-config", default="base",
                   help="the GEM config of model gem_base (default: base)")
    p.add_argument("--control", default="mlp", choices=list(MODELS),
                   help="the model the others are compared with (slopes, and each age's "
                        "paired difference)")
    p.add_argument("--teacher-config", default="small")
    p.add_argument("--mlp-config", default="mlp_small")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="trainer keys of both configs (max_epochs=1, max_seq_len=256), "
                        "model.KEY / mlp.KEY for model hyper-parameters")
    p.add_argument("--groups", "--domains", nargs="+", default=[ALL], dest="groups",
                   help="domain groups to report: 'all' and/or domain names (the models train "
                        "on every domain; a domain's NE uses the window's rate on that domain)")
    p.add_argument("--task", default=None, help="the task of the markdown and plot "
                   "(default: the dataset's first); the JSON has every task")
    p.add_argument("--bootstrap", type=int, default=200, help="bootstrap replicates")
    p.add_argument("--bootstrap-seed", type=int, default=0)
    p.add_argument("--accelerator", choices=["auto", "cpu", "gpu"], default="cpu")
    p.add_argument("--markdown", default=None)
    p.add_argument("--plot", default=None)
    p.add_argument("--keep", default=None, help="keep the runs under this directory")
    add_common_args(p)
    args = p.parse_args(argv)
    quiet_lightning()
    apply_common_args(p, args)  # --threads (--repeats: unused, nothing is timed here)
    if args.quick:  # a smoke run: one seed, few replicates (not reference figures)
        args.seeds, args.bootstrap = args.seeds[:1], min(args.bootstrap, 50)
    data = resolve_data(args.data)
    if data is None:
        print(f"skipped: no gemkd dataset at {args.data}")
        return None
    from gemkd.transfer.data.schema import DatasetSchema

    schema = DatasetSchema.load(data)
    first, end = args.eval_days
    wins = {a: window(a, args.window, first) for a in args.ages}
    bad = [a for a, (s, _) in wins.items() if s < min(schema.days)]
    if bad or end > max(schema.days) + 1 or first >= end:
        raise SystemExit(f"error: windows of ages {bad} or evaluation days {args.eval_days} do "
                         f"not fit the dataset's days {min(schema.days)}..{max(schema.days)}")
    unknown = [g for g in args.groups if g != ALL and g not in schema.domains]
    if unknown:
        raise SystemExit(f"error: --groups {unknown}: the dataset's domains are "
                         f"{', '.join(schema.domains)} (or 'all')")
    task = args.task or schema.tasks[0]
    teacher, mlp, base = build_configs(args.teacher_config, args.mlp_config, args.overrides,
                                       args.accelerator,
                                       args.base_config if "gem_base" in args.models else None)
    days_used = sorted({d for s, e in wins.values() for d in range(s, e)} | set(range(first, end)))
    out: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json"}, "data": str(data),
        "windows": {str(a): list(w) for a, w in wins.items()}, "eval_days": [first, end],
        "day_spans_utc": {str(d): list(v) for d, v in day_spans(data, days_used).items()},
        "teacher": dataclasses.asdict(teacher), "mlp": dataclasses.asdict(mlp),
        "quick": args.quick,
    }
    print(f"data {data}: windows {wins}, evaluation days [{first}, {end})", flush=True)
    runs: list[Run] = []
    t_start = time.perf_counter()
    timings = []
    with tempfile.TemporaryDirectory(prefix="gemkd-aging-") as tmp:
        root = Path(args.keep or tmp)
        for age, days in wins.items():
            rates = window_base_rates(data, days, schema.tasks, args.groups)
            for seed in args.seeds:
                for model in args.models:
                    t0 = time.perf_counter()
                    ckpt, reused = train_window(model, teacher, mlp, days, seed, data,
                                                root / f"{model}-age{age}-s{seed}", base)
                    t1 = time.perf_counter()
                    rows = evaluate_rows(ckpt, data, (first, end))
                    runs.append(Run(model, age, seed, rows, rates))
                    t2 = time.perf_counter()
                    timings.append({"model": model, "age": age, "seed": seed, "reused": reused,
                                    "train_s": round(t1 - t0, 1), "eval_s": round(t2 - t1, 1)})
                    print(f"  {model} age {age} {list(days)} seed {seed}: "
                          f"{'reused' if reused else 'trained'} {t1 - t0:.0f} s, "
                          f"evaluated {t2 - t1:.0f} s", flush=True)
    curve, slopes, levels = aging_study(runs, groups=args.groups, samples=args.bootstrap,
                                        seed=args.bootstrap_seed, control=args.control,
                                        levels=True)
    out.update(curve=curve.to_dict("records"), slopes=slopes.to_dict("records"),
               levels=levels.to_dict("records"),
               timings=timings, seconds=round(time.perf_counter() - t_start, 1))
    write_json(args.json, out)
    text = markdown(curve, slopes, task, args.groups, unit=args.unit, levels=levels)
    print(text)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(text + "\n")
    if args.plot:
        plot(curve, task, args.groups, args.plot, args.name, args.unit)
    return out


if __name__ == "__main__":
    main()
