"""Building and running the Lightning ``Trainer`` for ranking models (DESIGN §3, training).

:func:`make_trainer` is the one place a ``pl.Trainer`` is built (a teacher's fit and export, a
domain FM's, a student's); :func:`build_trainer` is a teacher run's, writing a run directory.
``strategy`` is a config value (:data:`gemkd.transfer.options.Strategy`): ``"auto"`` (one process),
``"ddp"`` (gloo on CPU, nccl on GPU) or ``"fsdp"`` (FSDP2 through ``ModelParallelStrategy``; it
runs on CPU over gloo too). Checkpoints go to ``out_dir/checkpoints`` (``last.ckpt`` always;
under FSDP a sharded checkpoint directory), so every run is resumable with ``fit(...,
resume=True)``; the directory's files are named by
:class:`~gemkd.transfer.teacher_fit_dir.TeacherFitDir`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.loggers import Logger
from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

from gemkd.transfer.data.datamodule import AdsDataModule
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import STRATEGIES, Precision, Strategy, TrainerPrecision
from gemkd.transfer.teacher_fit_dir import TeacherFitDir
from gemkd.transfer.training.interrupt_checkpoint import InterruptCheckpoint
from gemkd.transfer.training.latest_checkpoint import LatestCheckpoint
from gemkd.transfer.training.loggers import RunCSVLogger
from gemkd.transfer.training.timed_checkpoint import TimedCheckpoint

#: a run's ``last.ckpt`` is also saved this often (minutes of training), mid-epoch: a killed fit
#: loses at most this much (:class:`~gemkd.transfer.training.timed_checkpoint.TimedCheckpoint`)
CHECKPOINT_MINUTES = 10.0


class Throughput(Callback):
    """Counts training examples and wall time; logs ``train/examples_per_s`` each epoch and keeps
    the run's totals in ``examples`` / ``seconds`` / ``examples_per_s`` (this process only)."""

    def __init__(self) -> None:
        self.examples = 0
        self.seconds = 0.0
        self._t0: float | None = None

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.seconds if self.seconds > 0 else math.nan

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._t0 is None:  # resumed mid-epoch: no epoch start, the clock starts here
            self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.examples += len(batch)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._t0 is not None:
            self.seconds += time.perf_counter() - self._t0
            self._t0 = None
        # every rank logs its own estimate of the whole run's rate: their mean, synced
        pl_module.log("train/examples_per_s", self.examples_per_s * trainer.world_size,
                      sync_dist=True)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._t0 is not None:  # stopped by max_steps mid-epoch
            self.seconds += time.perf_counter() - self._t0
            self._t0 = None


class ResumableLoader:
    """A training loader whose position survives a checkpoint (Lightning's ``_Stateful``).

    Wraps a loader over a gemkd ``DatasetReader`` (an ``EpochLoader``: each pass uses the
    reader's ``epoch`` for its shuffle, then advances it). The state is the pass's epoch, the
    batches yielded and whether the pass finished; on restore the same pass is replayed and the
    batches already trained on are skipped (read, not trained), so a resumed run sees exactly
    the batches an uninterrupted one would. ``consumed()`` tells how many batches of the current
    pass the trainer has processed (Lightning prefetches, so ``yielded`` runs ahead by one).
    """

    def __init__(self, loader, consumed: Callable[[], int] | None = None) -> None:
        self.loader = loader
        self.consumed = consumed
        self._epoch: int | None = None
        self._yielded = 0
        self._exhausted = False
        self._restore: dict[str, Any] | None = None

    @property
    def dataset(self):
        return self.loader.dataset

    def __iter__(self) -> Iterator:
        return self._pass()

    def _pass(self) -> Iterator:
        ds, skip = self.loader.dataset, 0
        if self._restore is not None:
            state, self._restore = self._restore, None
            if state.get("epoch") is not None:
                if state.get("exhausted"):
                    ds.set_epoch(int(state["epoch"]) + 1)
                else:
                    ds.set_epoch(int(state["epoch"]))
                    skip = (self.consumed() if self.consumed is not None
                            else max(0, int(state["yielded"]) - 1))
        self._epoch, self._yielded, self._exhausted = ds.epoch, 0, False
        for batch in self.loader:
            self._yielded += 1
            if self._yielded > skip:
                yield batch
        self._exhausted = True

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "yielded": self._yielded, "exhausted": self._exhausted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restore = dict(state)


def _strategy(strategy: Strategy, devices: int, accelerator: str, num_nodes: int = 1):
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if strategy == "fsdp":
        # data_parallel_size must be explicit: "auto" means num_nodes, i.e. nothing sharded
        # within a node. Every process of every node is one data-parallel shard.
        return ModelParallelStrategy(data_parallel_size=devices * num_nodes,
                                     tensor_parallel_size=1)
    if strategy == "ddp":
        on_gpu = accelerator in ("gpu", "cuda") or (
            accelerator == "auto" and torch.cuda.is_available())
        return DDPStrategy(process_group_backend=None if on_gpu else "gloo")
    return "auto"


def resolve_precision(precision: Precision, accelerator: str) -> TrainerPrecision:
    """``auto``: ``bf16-mixed`` where the fit runs on CUDA (``accelerator`` gpu/cuda, or auto with
    a CUDA device present), ``32-true`` on the CPU; any other value as it is."""
    if precision != "auto":
        return precision
    on_gpu = accelerator in ("gpu", "cuda") or (
        accelerator == "auto" and torch.cuda.is_available())
    return "bf16-mixed" if on_gpu else "32-true"


def make_trainer(
    *,
    accelerator: str = "auto",
    strategy: Strategy = "auto",
    devices: int = 1,
    num_nodes: int = 1,
    precision: Precision = "32-true",
    max_epochs: int = 1,
    max_steps: int = -1,
    grad_clip: float | None = None,
    callbacks: list[Callback] | None = None,
    logger: Logger | list[Logger] | bool | None = False,
    progress_bar: bool = False,
    model_summary: bool = False,
    checkpointing: bool = False,
    **trainer_kwargs: Any,
) -> pl.Trainer:
    """A ``pl.Trainer``, quiet by default (no logger, checkpoints, progress bar or model summary).

    ``strategy`` is gemkd's (:data:`~gemkd.transfer.options.Strategy`: ``ddp`` runs gloo on CPU,
    ``fsdp`` FSDP2); with ``accelerator="auto"`` a ``ddp``/``fsdp`` run without CUDA runs on CPU.
    ``grad_clip`` is the gradient-norm clip of automatic optimisation (a module that optimises
    manually, ``DistillModule``, clips itself and must get None here). Extra keyword arguments
    go to ``Trainer`` (``limit_val_batches``, ``log_every_n_steps``, ``default_root_dir``, ...;
    Lightning's own ``enable_*`` flags there win over ``progress_bar``, ``model_summary`` and
    ``checkpointing``).
    """
    flags: dict[str, Any] = {"enable_progress_bar": progress_bar,
                             "enable_model_summary": model_summary,
                             "enable_checkpointing": checkpointing}
    flags.update({k: trainer_kwargs.pop(k) for k in list(flags) if k in trainer_kwargs})
    if devices < 1:
        raise ConfigError(f"devices must be >= 1, got {devices}")
    if accelerator == "auto" and strategy in ("ddp", "fsdp") and not torch.cuda.is_available():
        accelerator = "cpu"
    return pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        num_nodes=num_nodes,
        strategy=_strategy(strategy, devices, accelerator, num_nodes),
        max_epochs=max_epochs,
        max_steps=max_steps,
        precision=resolve_precision(precision, accelerator),
        logger=logger,
        callbacks=list(callbacks or []),
        gradient_clip_val=grad_clip,
        **flags,
        **trainer_kwargs,
    )


def build_trainer(
    out_dir: str | Path,
    strategy: Strategy = "auto",
    devices: int = 1,
    max_epochs: int = 1,
    precision: Precision = "32-true",
    accelerator: str = "auto",
    log_every_n_steps: int = 50,
    *,
    max_steps: int = -1,
    checkpoint_every_n_steps: int | None = None,
    checkpoint_every_minutes: float | None = None,
    grad_clip: float | None = None,
    num_nodes: int = 1,
    select_best: str | None = None,
    patience: int | None = None,
    progress_bar: bool = True,
    callbacks: list[Callback] | None = None,
    loggers: list[Logger] | None = None,
    **trainer_kwargs: Any,
) -> pl.Trainer:
    """A ``Trainer`` writing ``out_dir/checkpoints/{last.ckpt,...}`` and ``out_dir/metrics.csv``
    (continued, not replaced, by a resumed fit).

    ``last.ckpt`` (:class:`~gemkd.transfer.training.latest_checkpoint.LatestCheckpoint`, the
    one copy of the latest state) is saved at epoch ends, every ``checkpoint_every_n_steps``
    when set, and every ``checkpoint_every_minutes`` of training (None:
    :data:`CHECKPOINT_MINUTES`; ``math.inf``: never), mid-epoch, so a killed fit resumes from
    the batch after that save; and when Ctrl-C or SIGTERM interrupts the fit, after the batch
    in flight (:class:`~.interrupt_checkpoint.InterruptCheckpoint`). ``grad_clip`` is the
    gradient-norm clip (DTensor gradients included under ``"fsdp"``). ``select_best`` names a
    validation metric (e.g. ``val/loss``): the epoch with its lowest value is also kept as
    ``checkpoints/best.ckpt``; ``patience`` stops training after that many validation rounds
    without improvement (Lightning's ``EarlyStopping``). ``loggers`` log beside the CSV (a
    TensorBoard or MLflow tracker). Extra keyword arguments go to ``Trainer``.
    """
    out_dir = Path(out_dir)
    run = TeacherFitDir(out_dir)
    # last.ckpt alone (no epoch=E-step=S.ckpt beside it holding the same state)
    # Ctrl-C / SIGTERM: the batch in flight is finished and last.ckpt saved before the fit ends
    cbs: list[Callback] = [LatestCheckpoint(run.last, checkpoint_every_n_steps),
                           Throughput(), InterruptCheckpoint(run.last)]
    minutes = CHECKPOINT_MINUTES if checkpoint_every_minutes is None else checkpoint_every_minutes
    if math.isfinite(minutes):
        cbs.append(TimedCheckpoint(run.last, minutes))
    if select_best is not None:
        cbs.append(ModelCheckpoint(dirpath=run.checkpoints, filename=TeacherFitDir.BEST,
                                   monitor=select_best, mode="min", save_top_k=1,
                                   enable_version_counter=False))
    if patience is not None:
        if select_best is None:
            raise ConfigError("patience needs a validation metric to watch (select_best)")
        cbs.append(EarlyStopping(monitor=select_best, mode="min", patience=patience))
    if progress_bar:
        cbs.append(TQDMProgressBar(refresh_rate=max(1, log_every_n_steps)))
    cbs += list(callbacks or [])
    return make_trainer(
        accelerator=accelerator, strategy=strategy, devices=devices, num_nodes=num_nodes,
        precision=precision, max_epochs=max_epochs, max_steps=max_steps, grad_clip=grad_clip,
        callbacks=cbs, logger=[RunCSVLogger(out_dir), *(loggers or [])],
        progress_bar=progress_bar, model_summary=True, checkpointing=True,
        default_root_dir=out_dir, log_every_n_steps=log_every_n_steps, num_sanity_val_steps=0,
        **trainer_kwargs,
    )


def throughput(trainer: pl.Trainer) -> Throughput | None:
    # (Lightning's callback connector sets trainer.callbacks; Trainer does not declare it)
    callbacks = trainer.callbacks  # type: ignore[attr-defined]
    return next((c for c in callbacks if isinstance(c, Throughput)), None)


def _label_counts(data_dir: str | Path, days: tuple[int, int] | list[int], tasks: list[str],
                  domains: list[str] | None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Positives ``[D, T]`` and rows ``[D]`` per domain of the schema over ``days``, and the
    schema's domain names (labels only are read)."""
    first, end = days
    reader = DatasetReader(data_dir, days=(first, end), batch_size=1 << 16, categorical=[],
                           dense=[], sequence=[], tasks=list(tasks), oracle=False,
                           domains=domains)
    names = list(reader.schema.domains)
    pos = np.zeros((len(names), len(tasks)))
    rows = np.zeros(len(names))
    for batch in reader:
        dom, labels = batch.domain.numpy(), batch.labels.double().numpy()
        for i in range(len(tasks)):
            pos[:, i] += np.bincount(dom, weights=labels[:, i], minlength=len(names))
        rows += np.bincount(dom, minlength=len(names))
    return pos, rows, names


def training_rates(data_dir: str | Path, days: tuple[int, int] | list[int], tasks: list[str],
                   domains: list[str] | None = None
                   ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """From one labels-only pass over the half-open training day range (and ``domains``): each
    task's positive rate, and ``{task: {domain: rate}}`` for each domain with rows — the p̄ of
    the all-domains NE and of each domain's (``RankingMetrics``)."""
    pos, rows, names = _label_counts(data_dir, days, tasks, domains)
    n = rows.sum()
    pooled = {t: float(pos[:, i].sum() / n) for i, t in enumerate(tasks)} if n else {}
    by_domain = {t: {d: float(pos[j, i] / rows[j]) for j, d in enumerate(names) if rows[j]}
                 for i, t in enumerate(tasks)}
    return pooled, by_domain


def training_base_rates(data_dir: str | Path, days: tuple[int, int] | list[int],
                        tasks: list[str], domains: list[str] | None = None) -> dict[str, float]:
    """Positive rate of each task over the half-open training day range (and ``domains``)."""
    return training_rates(data_dir, days, tasks, domains)[0]


def even_batch_limit(reader: DatasetReader, world_size: int) -> int:
    """Batches every rank is guaranteed to have in any epoch (row groups are dealt round-robin
    after a shuffle): the sum of the ``len(units) // world_size`` smallest units' batch counts.
    Distributed ranks must run the same number of steps, or the collectives hang."""
    counts = sorted(math.ceil(u.n_rows / reader.batch_size) for u in reader.units)
    per_rank = len(counts) // world_size
    if per_rank == 0:
        raise ConfigError(
            f"days {reader.days} have {len(counts)} row group(s), fewer than the {world_size} "
            "processes: every process needs at least one"
        )
    return sum(counts[:per_rank])


def fit(module: pl.LightningModule, datamodule: AdsDataModule, trainer: pl.Trainer,
        resume: bool = False) -> Path | None:
    """``trainer.fit``; with ``resume`` continue from ``last.ckpt`` of the trainer's run
    directory when it exists. Returns the checkpoint resumed from (or None).

    The training loader is a :class:`ResumableLoader`, so a run resumed mid-epoch continues with
    the next batch of the interrupted pass. With several processes, train and validation
    batches are capped at what every rank has (see :func:`even_batch_limit`)."""
    ckpt = TeacherFitDir(trainer.default_root_dir).resume_path() if resume else None
    if trainer.world_size > 1:
        trainer.limit_train_batches = even_batch_limit(
            datamodule.reader("train"), trainer.world_size)
        if datamodule.days.get("val") is not None:
            trainer.limit_val_batches = even_batch_limit(
                datamodule.reader("val"), trainer.world_size)
    # a batch progress counts in _ProcessedTrackers; Lightning declares their base class
    train = ResumableLoader(datamodule.train_dataloader(), consumed=lambda: (
        trainer.fit_loop.epoch_loop.batch_progress.current.processed))  # type: ignore[attr-defined]
    # no val days: an empty loader and no val batches (the datamodule's would read every day; no
    # loader at all makes Lightning warn that validation_step has nothing to run on)
    has_val = datamodule.days.get("val") is not None
    val = datamodule.val_dataloader() if has_val else []
    if not has_val:
        trainer.limit_val_batches = 0
    with warnings.catch_warnings():
        if ckpt is not None:  # the directory holds the checkpoint this fit continues from
            warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not "
                                    "empty")
        trainer.fit(module, train_dataloaders=train, val_dataloaders=val,
                    ckpt_path=str(ckpt) if ckpt else None)
    return ckpt
