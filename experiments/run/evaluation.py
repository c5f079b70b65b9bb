"""Scoring fixed predictors on a run's evaluation days: the oracle (synthetic data), the feature
oracle and the teachers' stores — NE/AUC/calibration and, for the bootstrap, per-user sums."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from gemkd.transfer.metrics.numerics import logit

if TYPE_CHECKING:
    from gemkd.transfer.io import fs


def oracle_logits(batch) -> torch.Tensor:
    """The oracle's probabilities as logits, clipped (metrics.numerics.EPS)."""
    return logit(batch.oracle)


def eval_metrics(data: Path, days: tuple[int, int], tasks: list[str], domains: list[str],
                 base_rates: dict[str, float], logits_fn,
                 only: list[str] | None = None, clusters: Path | None = None,
                 max_seq_len: int | None = None) -> dict[str, float]:
    """NE/AUC/calibration of ``logits_fn(batch)`` on ``days`` (and domains ``only``);
    ``clusters``: also write the per-user loss sums there (the report's bootstrap);
    ``max_seq_len``: histories cut to their most recent events (a model trained so)."""
    from gemkd.transfer.data.dataset_reader import DatasetReader
    from gemkd.transfer.metrics import RankingMetrics
    from gemkd.transfer.metrics.clusters import ClusterLoss

    metrics = RankingMetrics(tasks, len(domains), domains, base_rates=base_rates)
    sums = ClusterLoss(len(tasks))
    for batch in DatasetReader(data, days=days, batch_size=8192, tasks=tasks, domains=only,
                               max_seq_len=max_seq_len):
        logits = logits_fn(batch)
        metrics.update(logits, batch.labels, batch.domain)
        if clusters is not None:
            sums.update(logits, batch.labels, batch.user_id, batch.domain)
    if clusters is not None:
        sums.save(clusters, tasks, domains, base_rates)
    return {k: float(v) for k, v in metrics.compute().items()}


def feature_oracle_metrics(data: Path, days: tuple[int, int], tasks: list[str],
                           domains: list[str], base_rates: dict[str, float],
                           only: list[str] | None = None) -> dict[str, float]:
    """NE/AUC/calibration of the feature oracle (synthetic data: the world's probabilities with
    each user's vector replaced by what their history reveals, DESIGN §2.3) on ``days``."""
    import numpy as np

    from gemkd.transfer.data.synth.feature_oracle import feature_oracle_probs

    fo = feature_oracle_probs(data, range(*days), only)
    order = np.argsort(fo.example_id)
    ids = fo.example_id[order]
    p = np.stack([fo.probs[t] for t in tasks], axis=1)[order]
    logits = torch.from_numpy(logit(p)).float()

    def logits_fn(batch) -> torch.Tensor:
        return logits[torch.from_numpy(np.searchsorted(ids, batch.example_id.numpy()))]

    return eval_metrics(data, days, tasks, domains, base_rates, logits_fn, only)


def store_logits(store: fs.Where, tasks: list[str]):
    from gemkd.transfer.distill import StoreTeacher
    from gemkd.transfer.store import TeacherStore

    teacher = StoreTeacher(TeacherStore(store), tasks, policy="error")
    return lambda batch: teacher(batch).logits


def has_oracle(data: Path) -> bool:
    from gemkd.transfer.data.schema import DatasetSchema

    return bool(DatasetSchema.load(data).oracle)
