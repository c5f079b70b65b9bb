"""Train one student variant once through its days and evaluate it (DESIGN §5, §6.1)."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from gemkd.experiments.run.methods import build_methods, variant_needs
from gemkd.experiments.run.train_knobs import with_train_knobs
from gemkd.experiments.spec.run_spec import RunSpec, VariantSpec
from gemkd.students import build_student
from gemkd.transfer.data.datamodule import AdsDataModule
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.distill import DistillModule, StoreTeacher
from gemkd.transfer.io import fs
from gemkd.transfer.methods import MethodContext
from gemkd.transfer.metrics.clusters import ClusterLoss
from gemkd.transfer.repr_features import AsOfCodes, CodeStore
from gemkd.transfer.store import TeacherStore
from gemkd.transfer.store.stream_join import StreamJoin
from gemkd.transfer.training import make_trainer
from gemkd.transfer.training.ema import StreamEMA


@dataclass
class StudentJob:
    variant: VariantSpec
    params: dict[str, Any]
    seed: int
    train_days: tuple[int, int]
    eval_days: tuple[int, int]
    trained_until_day: int
    perturb: str | None = None  # robustness's repeat: the initial weights moved (perturbed.py)


@dataclass
class Inputs:
    """What the lag's upstream steps made: the teacher sources' stores (``gem``, ``domain_fm``),
    the LoopFM codes (a verified ``CodeStore``, whose as-of index each student scope opens, or
    one ``AsOfCodes`` every student shares) and a loader of the GEM teacher's weights (None for
    an imported store) and the SOLARIS pair store (a ``PairStore``)."""

    stores: dict[str, fs.Where]
    codes: Any = None
    teacher_weights: Any = None
    pairs: Any = None
    max_events: int = 50
    _joins: dict[tuple, StreamJoin] = field(default_factory=dict, repr=False)
    _stores: dict[str, TeacherStore] = field(default_factory=dict, repr=False)
    _asof: dict[tuple[int, int], AsOfCodes] = field(default_factory=dict, repr=False)

    def codes_for(self, days: tuple[int, int]) -> AsOfCodes | None:
        """The as-of index of the codes for one student reading ``days`` (half-open): the days'
        codes and each user's ``max_events`` latest before them, not the whole store; students
        of one scope share it, and one scope's index is held at a time."""
        if not isinstance(self.codes, CodeStore):
            return self.codes
        if days not in self._asof:
            self._asof.clear()
            self._asof[days] = AsOfCodes(self.codes, max_events=self.max_events, days=days)
        return self._asof[days]

    def teacher(self, source: str, tasks: list[str], with_emb: bool, days: tuple[int, int],
                domains: list[int] | None) -> StoreTeacher:
        """A ``StoreTeacher`` of ``source`` for one student reading ``days`` (half-open) of
        ``domains`` (None: all): the store is opened and verified once per process and lag,
        and joined row group by row group within the student's scope (memory bounded by a few
        row groups, not the store); students of one scope share the join's cache, each with
        its own coverage count."""
        if source not in self._stores:
            self._stores[source] = TeacherStore(self.stores[source])
        key = (source, with_emb, days, None if domains is None else tuple(domains))
        if key not in self._joins:
            for other in self._joins.values():  # one scope's row groups held at a time
                other.release()
            self._joins[key] = StreamJoin(self._stores[source], days=days, domains=domains,
                                          policy="mask", with_emb=with_emb)
        join = self._joins[key].fresh()
        return StoreTeacher(join.store, tasks, days=days, policy="mask", with_emb=with_emb,
                            join=join)


class UserLoss(pl.Callback):
    """The test pass's log loss summed per (user, domain): what the user-level bootstrap of the
    report resamples (a few kB per run instead of every prediction)."""

    def __init__(self, n_tasks: int) -> None:
        self.sums = ClusterLoss(n_tasks)

    def on_test_batch_end(self, trainer, module, outputs, batch, batch_idx,
                          dataloader_idx: int = 0) -> None:
        self.sums.update(outputs["logits"], batch.labels, batch.user_id, batch.domain,
                         outputs["mask"])


class _Curve(pl.Callback):
    """The training loss per step. Losses are kept as (detached) tensors and read once at the
    end: a ``float(loss)`` per step is a host sync on an accelerator."""

    def __init__(self) -> None:
        self._steps: list[int] = []
        self._losses: list[torch.Tensor] = []
        self.examples = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.examples += len(batch)
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._steps.append(trainer.global_step)
            self._losses.append(loss.detach())

    @property
    def rows(self) -> list[tuple[int, float]]:
        losses = torch.stack(self._losses).cpu().tolist() if self._losses else []
        return list(zip(self._steps, losses, strict=True))


def build_module(spec: RunSpec, job: StudentJob, data: fs.Where, inputs: Inputs,
                 base_rates: dict[str, float]) -> tuple[DistillModule, StoreTeacher | None]:
    """The student, its methods (set up in the variant's order) and the training module (at the
    run's own ``lr`` where its params tune it)."""
    spec = with_train_knobs(spec, job.params)
    schema = DatasetSchema.load(data)
    tasks = list(spec.student_tasks)
    methods = build_methods(spec, job.variant, job.params)
    needs = variant_needs(job.variant)
    teacher = None
    scope = (min(job.train_days[0], job.eval_days[0]), max(job.train_days[1],
                                                           job.eval_days[1]))
    ctx = MethodContext(schema=schema, tasks=tasks, domains=schema.domains, lr=spec.lr,
                        codes=inputs.codes_for(scope), pairs=inputs.pairs,
                        trained_until_day=job.trained_until_day,
                        teacher_weights=inputs.teacher_weights,
                        sample_batch=lambda: _sample_batch(spec, job, data, ctx.student))
    feature_dim = sum(m.feature_dim(ctx) for m in methods)
    init_args = dict(spec.student.init_args)
    if feature_dim:
        init_args["repr_dim"] = feature_dim
    config = {"class_path": spec.student.class_path, "init_args": init_args}
    student = build_student(config, schema, tasks)
    if needs & {"teacher", "teacher_emb"}:
        domains = ([schema.domains.index(spec.student_domain)] if spec.student_domain
                   else None)
        teacher = inputs.teacher(job.variant.teacher, tasks, with_emb="teacher_emb" in needs,
                                 days=scope, domains=domains)
    ctx.student, ctx.teacher = student, teacher
    for m in methods:
        m.setup(ctx)
    module = DistillModule(student, tasks, schema.domains, methods=methods, teacher=teacher,
                           trained_until_day=job.trained_until_day, lr=spec.lr,
                           base_rates=base_rates, table_optimizer=spec.table_optimizer,
                           table_min_rows=spec.table_min_rows)
    module.student_config = config  # what rebuilds the student (a kept student's file)
    if job.perturb:
        from gemkd.transfer.training.ulp_perturb import perturb_weights

        perturb_weights(module, job.perturb, job.seed)
    return module, teacher


def train_student(spec: RunSpec, job: StudentJob, data: fs.Where, inputs: Inputs,
                  base_rates: dict[str, float], curve_path: Path | None = None,
                  callbacks: list[pl.Callback] | None = None,
                  logger: Any = False, clusters_path: Path | None = None,
                  on_trained: Callable[[DistillModule, dict[str, float]], None] | None = None
                  ) -> dict[str, Any]:
    """Returns ``{"metrics": {...}, "train_seconds", "eval_seconds", "examples_per_second",
    "coverage"}``;
    ``callbacks`` are added to the student's Trainer (e.g. a benchmark's clock); ``logger`` a
    Lightning logger for the fit and the evaluation (False: none, the default);
    ``clusters_path``: write the evaluation's per-user loss sums there (the bootstrap's input,
    :mod:`gemkd.transfer.metrics.clusters`); ``on_trained``: called with the module as it
    was evaluated (its weight average in place) and the metrics. The job's params set the
    student's ``lr`` and ``ema_decay`` where they hold them
    (:mod:`gemkd.experiments.run.train_knobs`)."""
    spec = with_train_knobs(spec, job.params)
    pl.seed_everything(job.seed, verbose=False)
    module, teacher = build_module(spec, job, data, inputs, base_rates)
    user_loss = None
    if clusters_path is not None:
        user_loss = UserLoss(len(spec.student_tasks))
        callbacks = [*(callbacks or []), user_loss]
    dm = student_datamodule(spec, job, data, module.model)
    curve = _Curve()
    if spec.ema_decay is not None:  # evaluate the stream's moving average of the weights
        callbacks = [*(callbacks or []), StreamEMA(spec.ema_decay)]
    trainer = make_trainer(accelerator=spec.accelerator, logger=logger,
                           callbacks=[curve, *(callbacks or [])],
                           log_every_n_steps=NO_LOG_STEP if logger is False or logger == []
                           else LOG_EVERY_N_STEPS,  # None, True: Lightning's default logger
                           limit_val_batches=0)  # no sanity check, no validation
    t0 = time.perf_counter()
    # the loaders, not the data module: with a data module Lightning asks, for each of the three
    # batch-transfer hooks of every step, which of the two overrides it (AdsDataModule has none)
    # (an empty validation list, not none: Lightning warns when validation_step has no loader)
    trainer.fit(module, train_dataloaders=dm.train_dataloader(), val_dataloaders=[])
    seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    trainer.test(module, dataloaders=dm.test_dataloader(), verbose=False)
    eval_seconds = time.perf_counter() - t1
    if on_trained is not None:
        on_trained(module, module.last_metrics["test"])
    if user_loss is not None and clusters_path is not None:  # one comes with the other
        user_loss.sums.save(clusters_path, list(spec.student_tasks), list(module.domains),
                            base_rates)
    if curve_path is not None:
        curve_path.parent.mkdir(parents=True, exist_ok=True)
        with open(curve_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "train_loss"])
            w.writerows(curve.rows)
    return {"metrics": module.last_metrics["test"], "train_seconds": seconds,
            "eval_seconds": eval_seconds, "examples_per_second": curve.examples / seconds,
            "coverage": teacher.coverage if teacher else float("nan")}


#: The fit logs its training losses every this many steps to a logger; without one it never
#: reaches a logging step: nothing would read the values, and Lightning's first ``self.log`` of
#: a fit costs milliseconds (it builds its result metrics).
LOG_EVERY_N_STEPS, NO_LOG_STEP = 50, 2**62

#: Batches the student's training loader reads ahead in a background thread: enough to cover
#: the read of the next Parquet row group (a small world's day) while the steps go on.
PREFETCH_BATCHES = 16


def student_datamodule(spec: RunSpec, job: StudentJob, data: fs.Where,
                       student: torch.nn.Module) -> AdsDataModule:
    """The student's data: its days in time order (no shuffle: one streaming pass), its domain,
    only the columns it reads, training batches prefetched in a background thread, decoded row
    groups kept for the process's next student (a sweep's worker reads its days once)."""
    only = [spec.student_domain] if spec.student_domain else None
    return AdsDataModule(data, train_days=job.train_days, test_days=job.eval_days,
                         batch_size=spec.batch_size, shuffle=False, prefetch=PREFETCH_BATCHES,
                         tasks=list(spec.student_tasks), domains=only, cache=True,
                         **student_projection(student))


def student_projection(student: torch.nn.Module) -> dict[str, Any]:
    """Reader arguments that skip what the student never reads: the oracle columns always; for
    a :class:`StudentBase` also the sequence fields it does not use and events beyond its
    ``max_seq_len`` most recent (the reader keeps the most recent, as the student would).
    A plug-in student that is not a StudentBase gets every column."""
    from gemkd.students.student_base import StudentBase

    if not isinstance(student, StudentBase):
        return {"oracle": False}
    return {"oracle": False, "sequence": list(student.sequence),
            "max_seq_len": student.max_seq_len}


def _sample_batch(spec: RunSpec, job: StudentJob, data: fs.Where, student: torch.nn.Module | None):
    """A few training rows as the student's loader reads them (its domain, columns and history
    cut; through the process's decoded row groups, which the run's training pass then reuses):
    not a decode of every column and event of a row group per run."""
    only = [spec.student_domain] if spec.student_domain else None
    projection = student_projection(student) if student is not None else {"oracle": False}
    reader = DatasetReader(data, days=job.train_days, batch_size=8, shuffle=False,
                           tasks=list(spec.student_tasks), domains=only, cache=True,
                           **projection)
    return next(iter(reader))
