"""Distil a teacher store into a student inside a Lightning module of your own, without
``gemkd run`` (docs/guides/own_loop.md).

    python docs/examples/own_loop/distill_own_loop.py --data DATA --store STORE \
        [--codes CODES] --train-days 3:5 --eval-days 5:6

Everything gemkd-specific comes from the ``gemkd`` package's public names:

* ``gemkd.DistillDataModule``: the student's days in time order, each batch joined to the
  teacher store a row group at a time, with the user's as-of LoopFM codes (a ``TeacherBatch``);
* ``gemkd.kd_bce``: Hinton's soft-target loss, per element (rows without a teacher masked);
* ``gemkd.StudentAdapter``: realigns a stale teacher's logits on the fresh labels;
* ``gemkd.build_student``: a built-in student (or bring any ``nn.Module``), fed the codes.

The loss is ``(1 − α)·BCE(student, y) + α·kd_bce(student, stopgrad(adapter))`` plus the
adapter's own ``BCE(adapter, y)`` on the rows the store has: the recipe of the ``kd`` +
``adapter`` methods, written out in a training step you own.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

import gemkd


class OwnDistiller(pl.LightningModule):
    """A user's module: a student, a Student Adapter, and the loss written out."""

    def __init__(self, student: torch.nn.Module, n_tasks: int, n_domains: int,
                 alpha: float = 0.5, temperature: float = 2.0, lr: float = 0.01) -> None:
        super().__init__()
        self.student = student
        self.adapter = gemkd.StudentAdapter(n_tasks, n_domains)
        self.alpha, self.temperature, self.lr = alpha, temperature, lr
        self.kd_terms: list[float] = []  # the KD term per step (what the test reads)

    def forward(self, tb: gemkd.TeacherBatch) -> torch.Tensor:
        out = self.student(tb.batch, tb.codes) if tb.codes is not None \
            else self.student(tb.batch)
        return out.logits

    def training_step(self, tb: gemkd.TeacherBatch, batch_idx: int) -> torch.Tensor:
        y = tb.batch.labels
        z_s = self(tb)
        found = tb.teacher.found
        label = F.binary_cross_entropy_with_logits(z_s, y)
        if not bool(found.any()):  # no teacher row in this batch: labels only
            return label
        z_sa = self.adapter(tb.teacher.logits, tb.batch.domain, tb.staleness)
        adapter = F.binary_cross_entropy_with_logits(z_sa[found], y[found])
        kd = gemkd.kd_bce(z_s[found], z_sa[found].detach(), self.temperature).mean()
        self.kd_terms.append(float(kd.detach()))
        self.log("train/kd", kd, batch_size=len(tb))
        return (1 - self.alpha) * label + self.alpha * kd + adapter

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def base_rate_bias(student: torch.nn.Module, rates: list[float]) -> None:
    """Start the student's head at the training base rates (a short stream would otherwise
    spend its first steps calibrating)."""
    with torch.no_grad():
        student.head.bias.copy_(torch.logit(torch.tensor(rates)))


@torch.no_grad()
def evaluate(model: OwnDistiller, dm: gemkd.DistillDataModule, days: tuple[int, int],
             rates: list[float]) -> dict[str, float]:
    """NE per task on ``days``: the log loss over that of predicting the training rate."""
    model.eval()
    loss = torch.zeros(len(rates), dtype=torch.float64)
    n = 0
    for tb in dm.loader(days):
        z = model(tb).double()
        loss += F.binary_cross_entropy_with_logits(z, tb.batch.labels.double(),
                                                   reduction="none").sum(0)
        n += len(tb)
    p = torch.tensor(rates, dtype=torch.float64)
    entropy = -(p * p.log() + (1 - p) * (1 - p).log())
    model.train()
    return {t: float(v) for t, v in zip(dm.tasks, loss / n / entropy, strict=True)}


def main(data: str, store: str, train_days: tuple[int, int], eval_days: tuple[int, int],
         codes: str | None = None, tasks: tuple[str, ...] = ("click",), alpha: float = 0.5,
         temperature: float = 2.0, seed: int = 0) -> dict[str, Any]:
    """Train one student from the store (and codes) on ``train_days`` and evaluate it on
    ``eval_days``; returns its NE before and after training and its KD terms."""
    pl.seed_everything(seed, verbose=False)
    dm = gemkd.DistillDataModule(data, store, list(tasks), train_days=train_days,
                                 codes=codes, batch_size=256, max_seq_len=20)
    schema = gemkd.DatasetReader(data, days=train_days, batch_size=1).schema
    student = gemkd.build_student({"class_path": "mlp",
                                   "init_args": {"hidden": [16], "repr_dim": dm.code_dim}},
                                  schema, list(tasks))
    rates = training_rates(dm, train_days)
    base_rate_bias(student, rates)
    model = OwnDistiller(student, len(tasks), len(schema.domains), alpha, temperature)
    before = evaluate(model, dm, eval_days, rates)
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         accelerator="cpu")
    trainer.fit(model, datamodule=dm)
    after = evaluate(model, dm, eval_days, rates)
    return {"ne_before": before, "ne_after": after, "kd_terms": model.kd_terms,
            "model": model}


@torch.no_grad()
def training_rates(dm: gemkd.DistillDataModule, days: tuple[int, int]) -> list[float]:
    """Each task's positive rate on the training days."""
    pos = torch.zeros(len(dm.tasks), dtype=torch.float64)
    n = 0
    reader = gemkd.DatasetReader(dm.data, days=days, batch_size=4096, tasks=dm.tasks,
                                 oracle=False, sequence=[], dense=[])
    for b in reader:
        pos += b.labels.double().sum(0)
        n += len(b)
    return [float(min(max(r, 1e-4), 1 - 1e-4)) for r in pos / max(n, 1)]


def _days(text: str) -> tuple[int, int]:
    first, _, end = text.partition(":")
    return int(first), int(end)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--store", required=True)
    p.add_argument("--codes")
    p.add_argument("--train-days", type=_days, required=True)
    p.add_argument("--eval-days", type=_days, required=True)
    p.add_argument("--alpha", type=float, default=0.5)
    args = p.parse_args()
    res = main(args.data, args.store, args.train_days, args.eval_days, args.codes,
               alpha=args.alpha)
    print(json.dumps({k: res[k] for k in ("ne_before", "ne_after")}, indent=2))
