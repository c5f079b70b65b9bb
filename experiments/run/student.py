"""Train one student variant once through its days and evaluate it (DESIGN §5, §6.1)."""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from adapters import AuxDistillHead, StudentAdapter
from students import build_student
from transfer.data.datamodule import AdsDataModule
from transfer.data.schema import DatasetSchema
from transfer.distill import DistillModule, KDConfig, StoreTeacher
from transfer.repr_features import AsOfCodes, CodeStore, pool_mean
from transfer.store import TeacherStore
from transfer.training.ema import StreamEMA

# What each variant switches on. "teacher" picks the store: GEM's or the domain FM's.
VARIANT_PARTS: dict[str, dict[str, Any]] = {
    "baseline": {"teacher": None},
    "kd": {"teacher": "gem"},
    "kd_aux": {"teacher": "gem", "aux": True},
    "kd_aux_adapter": {"teacher": "gem", "aux": True, "adapter": True},
    "kd_repr": {"teacher": "gem", "repr": True},
    "hierarchical": {"teacher": "fm"},
    "full": {"teacher": "gem", "aux": True, "adapter": True, "repr": True},
}


@dataclass
class StudentJob:
    variant: str
    params: dict[str, float]
    seed: int
    train_days: tuple[int, int]
    eval_days: tuple[int, int]
    trained_until_day: int


class CodeFeatures:
    """batch → mean of the user's LoopFM codes strictly before the example, ``[B, code_dim]``."""

    def __init__(self, codes: Path, max_events: int) -> None:
        self.path = Path(codes)
        self.asof = AsOfCodes(CodeStore(codes), max_events=max_events)
        self.dim = self.asof.code_dim

    def __call__(self, batch) -> torch.Tensor:
        values, offsets = self.asof.lookup(batch.user_id, batch.ts)
        return pool_mean(values, offsets)


class _Curve(pl.Callback):
    def __init__(self) -> None:
        self.rows: list[tuple[int, float]] = []
        self.examples = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.examples += len(batch)
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.rows.append((trainer.global_step, float(loss)))


def train_student(spec, job: StudentJob, data: Path, stores: dict[str, Path | None],
                  codes: CodeFeatures | None, base_rates: dict[str, float],
                  curve_path: Path | None = None,
                  callbacks: list[pl.Callback] | None = None) -> dict[str, Any]:
    """Returns ``{"metrics": {...}, "train_seconds", "examples_per_second", "coverage"}``;
    ``callbacks`` are added to the student's Trainer (e.g. a benchmark's clock)."""
    parts = VARIANT_PARTS[job.variant]
    pl.seed_everything(job.seed, verbose=False)
    schema = DatasetSchema.load(data)
    tasks = list(spec.student_tasks)
    student_spec = {"class_path": spec.student.get("class_path", "mlp"),
                    "init_args": dict(spec.student.get("init_args") or {})}
    use_repr = bool(parts.get("repr"))
    if use_repr:
        student_spec["init_args"]["repr_dim"] = codes.dim
    student = build_student(student_spec, schema, tasks)
    teacher = None
    if parts["teacher"] is not None:
        teacher = StoreTeacher(TeacherStore(stores[parts["teacher"]]), tasks, policy="mask")
    aux = adapter = None
    if parts.get("aux"):
        aux = AuxDistillHead(_embedding_width(student, data, job), len(tasks),
                             beta=job.params["aux_beta"])
    if parts.get("adapter"):
        adapter = StudentAdapter(len(tasks), len(schema.domains),
                                 hidden=int(job.params["adapter_hidden"]))
    kd = KDConfig(weight=job.params.get("kd_weight", 0.0) if teacher else 0.0,
                  temperature=job.params.get("temperature", 1.0), loss=spec.kd_loss)
    module = DistillModule(student, tasks, schema.domains, kd=kd, teacher=teacher,
                           aux_head=aux, adapter=adapter, features=codes if use_repr else None,
                           trained_until_day=job.trained_until_day, lr=spec.lr,
                           base_rates=base_rates)
    only = [spec.student_domain] if spec.student_domain else None
    dm = AdsDataModule(data, train_days=job.train_days, test_days=job.eval_days,
                       batch_size=spec.batch_size, shuffle=False, tasks=tasks, domains=only,
                       **student_projection(student))
    curve = _Curve()
    if spec.ema_decay is not None:  # evaluate the stream's moving average of the weights
        callbacks = [*(callbacks or []), StreamEMA(spec.ema_decay)]
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         accelerator=spec.accelerator, devices=1,
                         callbacks=[curve, *(callbacks or [])],
                         limit_val_batches=0)  # no sanity check, no validation
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    seconds = time.perf_counter() - t0
    trainer.test(module, datamodule=dm, verbose=False)
    if curve_path is not None:
        curve_path.parent.mkdir(parents=True, exist_ok=True)
        with open(curve_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "train_loss"])
            w.writerows(curve.rows)
    return {"metrics": module.last_metrics["test"], "train_seconds": seconds,
            "examples_per_second": curve.examples / seconds,
            "coverage": teacher.coverage if teacher else float("nan")}


def student_projection(student: torch.nn.Module) -> dict[str, Any]:
    """Reader arguments that skip what the student never reads: the oracle columns always; for
    a :class:`StudentBase` also the sequence fields it does not use and events beyond its
    ``max_seq_len`` most recent (the reader keeps the most recent, as the student would).
    A plug-in student that is not a StudentBase gets every column."""
    from students.base import StudentBase

    if not isinstance(student, StudentBase):
        return {"oracle": False}
    return {"oracle": False, "sequence": list(student.sequence),
            "max_seq_len": student.max_seq_len}


def _embedding_width(student: torch.nn.Module, data: Path, job: StudentJob) -> int:
    """The trunk width a student returns, read off one forward pass."""
    from transfer.data.reader import DatasetReader

    batch = next(iter(DatasetReader(data, days=job.train_days, batch_size=8)))
    with torch.no_grad():
        out = student(batch)
    if out.embedding is None:
        raise ValueError(f"{type(student).__name__} returns no embedding: the auxiliary head "
                         "needs StudentOutput.embedding")
    return int(out.embedding.shape[-1])
