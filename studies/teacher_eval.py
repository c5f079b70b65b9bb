"""``evaluate_teacher``: a trained teacher's NE / AUC / calibration on chosen days, from its
checkpoint (what ``studies/teacher_ablation.py`` compares teachers by). A benchmark's tool,
outside the installed package."""

from __future__ import annotations

from pathlib import Path

import torch

from gemkd.experiments.teacher.teacher_config import load_teacher


@torch.inference_mode()
def evaluate_teacher(ckpt: str | Path, data: str | Path, days: tuple[int, int],
                     base_rates: dict[str, float], *, batch_size: int = 4096,
                     domains: list[str] | None = None,
                     domain_base_rates: dict[str, dict[str, float]] | None = None
                     ) -> dict[str, float]:
    """Metrics ``{metric}/{task}/{domain}`` of the teacher at ``ckpt`` (its ``config.yaml``
    beside ``checkpoints/``) on ``days`` of ``data`` (optionally only ``domains``); NE uses
    ``base_rates`` (the training days' positive rates, as every model's NE does) and, per
    domain row, ``domain_base_rates`` (each domain's own; without them the task's)."""
    from gemkd.transfer.data.dataset_reader import DatasetReader
    from gemkd.transfer.metrics import RankingMetrics

    teacher = load_teacher(ckpt, data)
    model, schema = teacher.model.eval(), teacher.schema
    metrics = RankingMetrics(schema.tasks, len(schema.domains), schema.domains,
                             base_rates=base_rates, domain_base_rates=domain_base_rates)
    for batch in DatasetReader(data, days=days, batch_size=batch_size, domains=domains,
                               max_seq_len=teacher.cfg.max_seq_len, oracle=False):
        metrics.update(model(batch).logits, batch.labels, batch.domain)
    return {k: float(v) for k, v in metrics.compute().items()}
