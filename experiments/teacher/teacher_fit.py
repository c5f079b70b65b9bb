"""``fit_teacher``: train a teacher with Lightning (the library function under ``gemkd teacher
fit``). The run directory (:class:`~gemkd.transfer.teacher_fit_dir.TeacherFitDir`)
gets ``config.yaml`` (resolved), ``metrics.csv``, ``checkpoints/last.ckpt`` (a directory under
fsdp) and ``val_metrics.json``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from gemkd.experiments.teacher.teacher_config import (
    TeacherTrainConfig,
    build_run,
    cache_key,
    load_teacher_config,
)
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.io import fs
from gemkd.transfer.options import Strategy, TrackerKind
from gemkd.transfer.teacher_fit_dir import TeacherFitDir
from gemkd.transfer.training.loggers import Tracker, make_logger


def _local_run_dir(out: str | Path) -> Path:
    """A teacher's run directory is local (or on a shared filesystem every node mounts):
    Lightning writes checkpoints there while training."""
    if fs.is_remote(str(out)):
        raise ConfigError(f"--out {out}: a teacher run directory must be a local (or shared) "
                          "path, not an object store; data may be on s3://")
    return Path(out)


def _tags(cfg: TeacherTrainConfig) -> dict[str, Any]:
    return {"config": cfg.name, "class_path": cfg.class_path, "train_days": cfg.train_days,
            "val_days": cfg.val_days, "strategy": cfg.strategy, "devices": cfg.devices,
            "num_nodes": cfg.num_nodes, **{f"model.{k}": v for k, v in cfg.model.items()}}


#: what ``select: best`` minimises: the training objective (Σ_t w_t · BCE_t) on validation days
SELECT_METRIC = "val/loss"


def fit_teacher(config: TeacherTrainConfig | str | Path, data: str | Path, out: str | Path, *,
                strategy: Strategy | None = None, devices: int | None = None,
                num_nodes: int | None = None, resume: bool = False,
                progress: bool = True, tracker: Tracker | TrackerKind | None = None,
                run_name: str = "teacher", domains: list[str] | None = None,
                distill_from: str | Path | None = None, stream: bool | None = None,
                train_days: tuple[int, int] | None = None,
                continue_from: str | Path | None = None,
                callbacks: list | None = None) -> dict[str, Any]:
    """Train a teacher (or a domain FM) and write its run directory.

    Parameters
    ----------
    config
        A :class:`TeacherTrainConfig`, or the path of a teacher config YAML.
    data
        The dataset (a directory or an s3:// URI).
    out
        The fit's run directory: ``checkpoints/``, ``metrics.csv`` (always written),
        ``val_metrics.json``.
    strategy, devices, num_nodes
        Override the config's keys of the same names (None: the config's).
    resume
        Continue from ``out/checkpoints/last.ckpt`` when it exists. It is saved at every epoch
        end, every day end of a streaming pass, every ``checkpoint_every_n_steps`` when set and
        every 10 minutes of training
        (:data:`~gemkd.transfer.training.trainer.CHECKPOINT_MINUTES`), mid-epoch too; it holds
        the weights, the optimizer and the position in the pass, so the resumed fit skips the
        batches already trained on and trains on the same batches as an uninterrupted one (the
        work since the last save is redone).
    progress
        Show Lightning's progress bar.
    tracker
        Also log the fit to TensorBoard or MLflow: a ``Tracker``, or its kind (then under
        ``out/logs``, the experiment named after the config).
    run_name
        The run's name in the tracker.
    domains
        Train on these domains' rows only (None: all).
    distill_from
        A teacher store to learn from with KD (a domain FM:
        :func:`~gemkd.experiments.teacher.teacher_config.build_run`).
    stream, train_days, continue_from
        Override the config's keys. ``stream`` also sets one epoch, the last kept and no early
        stopping: a streaming pass has no epoch to choose.
    callbacks
        Extra Lightning callbacks, after the run's own (e.g. a benchmark's timer).

    Returns
    -------
    dict
        The summary written to ``val_metrics.json``: global step, examples/s, the final
        validation metrics.

    Raises
    ------
    ConfigError
        If an override breaks a rule of the config, or ``continue_from`` would train again on
        days its checkpoint has seen.
    """
    from gemkd.transfer.training import build_trainer, fit
    from gemkd.transfer.training.trainer import throughput

    given: dict[str, Any] = {k: v for k, v in {
        "strategy": strategy, "devices": devices, "num_nodes": num_nodes,
        "train_days": list(train_days) if train_days is not None else None,
        "continue_from": str(continue_from) if continue_from is not None else None,
    }.items() if v is not None}
    if stream:  # one pass: no epoch to choose
        given.update(stream=True, max_epochs=1, select="last", patience=None)
    base = config if isinstance(config, TeacherTrainConfig) else load_teacher_config(config)
    try:
        cfg = dataclasses.replace(base, **given)
    except ValueError as e:
        raise ConfigError(f"config {base.name!r}: {e}") from None
    out = _local_run_dir(out)
    run = TeacherFitDir(out)
    if cfg.continue_from is not None:
        _check_continuation(cfg, cfg.continue_from)
    if resume:
        done = _finished(cfg, run)
        if done is not None:  # nothing left to train: the summary it wrote
            return done
    if isinstance(tracker, str):
        tracker = Tracker(tracker, run.logs, cfg.name)
    dm, module = build_run(cfg, data, domains=domains, distill_from=distill_from)
    loggers = []
    # csv for this run directory alone: that is metrics.csv, written anyway
    if tracker is not None and not (tracker.kind == "csv" and tracker.save_dir == run.logs):
        loggers.append(make_logger(tracker, run_name, _tags(cfg)))
    trainer = build_trainer(
        out, strategy=cfg.strategy, devices=cfg.devices, num_nodes=cfg.num_nodes,
        max_epochs=cfg.max_epochs, precision=cfg.precision, accelerator=cfg.accelerator,
        log_every_n_steps=cfg.log_every_n_steps, max_steps=cfg.max_steps,
        checkpoint_every_n_steps=cfg.checkpoint_every_n_steps,
        # a module that optimises manually (a domain FM's DistillModule) clips its own gradients
        grad_clip=cfg.grad_clip if module.automatic_optimization else None,
        select_best=SELECT_METRIC if cfg.select == "best" else None, patience=cfg.patience,
        progress_bar=progress, loggers=loggers,
        callbacks=[*_stream_callbacks(cfg, run, resume), *(callbacks or [])],
    )
    if cfg.stream and trainer.world_size > 1:
        raise ConfigError(f"config {cfg.name!r}: stream: true trains in one process (devices: "
                          "1, num_nodes: 1): its daily checkpoints need every batch of a day "
                          "before the next day's")
    if trainer.is_global_zero:
        run.write_config(dataclasses.asdict(cfg))
    resumed = fit(module, dm, trainer, resume=resume)
    used = run.best_or_last() if cfg.select == "best" else None
    if cfg.val_days is not None:  # final validation (of the kept epoch), also when max_steps
        trainer.validate(module, datamodule=dm, verbose=False,  # stopped mid-epoch
                         ckpt_path=str(used) if used is not None else None)
    tp = throughput(trainer)
    summary: dict[str, Any] = {
        "global_step": trainer.global_step,
        "resumed_from": str(resumed) if resumed else None,
        "examples_per_s": (tp.examples_per_s * trainer.world_size) if tp else None,
        "name": cfg.name,
        "checkpoint": str(used if used is not None else run.last),
        "epochs": trainer.current_epoch,
        "best_epoch": _epoch_of(used) if used is not None else None,
        "is_global_zero": trainer.is_global_zero,
    }
    if "val" in module.last_metrics:
        summary["val"] = module.last_metrics["val"]
    if trainer.is_global_zero:
        run.write_summary(summary)
        if not cfg.stream:  # (a stream's checkpoints are continued: they keep the optimizer)
            _finalize(run)
    return summary


def _finalize(run: TeacherFitDir) -> None:
    """A finished fit keeps one checkpoint, weights only (export, warm starts and parameter
    sharing read nothing else): ``best.ckpt`` where the fit kept its best epoch (then
    ``last.ckpt``, a resume state, is removed), else ``last.ckpt``. Called after the summary is
    written, so a fit killed in between finds it on ``--resume`` (:func:`_finished`) and ends
    here again."""
    from gemkd.transfer.training.latest_checkpoint import weights_only

    used = run.best_or_last()
    weights_only(used)
    if run.is_best(used):
        run.drop_last()


def _finished(cfg: TeacherTrainConfig, run: TeacherFitDir) -> dict[str, Any] | None:
    """The summary of a fit in ``out`` that finished (its checkpoint is final: weights only),
    or None when there is none or it can still be resumed. A finished fit of another config is
    a ConfigError: it cannot be trained further (no optimizer state), only started from."""
    import torch

    from gemkd.transfer.training.latest_checkpoint import is_final

    out = run.root
    ckpt = run.best_or_last()
    if not ckpt.is_file() or not is_final(torch.load(ckpt, map_location="cpu", mmap=True,
                                                     weights_only=False)):
        return None
    if not run.has_summary() or not run.has_config():
        raise ConfigError(f"--resume {out}: {ckpt.name} is a finished fit's (weights only) but "
                          f"{run.SUMMARY} or {run.CONFIG} is missing beside it")
    wanted, written = (yaml.safe_load(yaml.safe_dump(cache_key(c)))
                       for c in (cfg, load_teacher_config(run.config_file)))
    changed = [k for k in wanted if wanted[k] != written.get(k)]
    if changed:
        k = changed[0]
        raise ConfigError(f"--resume {out}: the fit there has finished with {k}: {written.get(k)}"
                          f" (this config: {wanted[k]}); its {ckpt.name} holds the weights only "
                          f"(no optimizer state), so it cannot train further: use a new --out "
                          f"(init_from: {ckpt} starts from its weights)")
    _finalize(run)  # (again, if a kill came between the summary and the checkpoint)
    return run.read_summary()


def _stream_callbacks(cfg: TeacherTrainConfig, run: TeacherFitDir, resume: bool) -> list:
    """Daily checkpoints of a streaming pass; the optimizer state of the run it continues
    (not when this fit resumes its own checkpoint, which holds a later state)."""
    from gemkd.transfer.training.continue_from import RestoreOptimizerState
    from gemkd.transfer.training.day_checkpoints import DayCheckpoints

    cbs: list = [DayCheckpoints(run)] if cfg.stream else []
    if cfg.continue_from is not None and not (resume and run.resume_path() is not None):
        cbs.append(RestoreOptimizerState(cfg.continue_from))
    return cbs


def trained_until(ckpt: str | Path) -> int:
    """The last day the teacher at ``ckpt`` trained on: N for a ``day=N.ckpt``, else the end
    of its run's ``train_days`` (``config.yaml`` beside ``checkpoints/``)."""
    from gemkd.experiments.teacher.teacher_checkpoint import check_checkpoint
    from gemkd.experiments.teacher.teacher_config import load_teacher_config

    ckpt = check_checkpoint(ckpt, "continue_from")
    day = TeacherFitDir.checkpoint_day(ckpt)
    if day is not None:
        return day
    run = TeacherFitDir.of_checkpoint(ckpt)
    if not run.has_config():
        raise ConfigError(f"continue_from {ckpt}: no {run.CONFIG} of its run beside "
                          f"{run.CHECKPOINTS}/, so the days it trained on are unknown")
    return load_teacher_config(run.config_file).train_days[1] - 1


def _check_continuation(cfg: TeacherTrainConfig, continue_from: str) -> None:
    """A continued run trains on later days only: a second pass over days the checkpoint saw
    over-fits the ID tables (the best epoch was the first or second)."""
    until = trained_until(continue_from)
    if cfg.train_days[0] <= until:
        raise ConfigError(f"continue_from {cfg.continue_from}: it trained until day {until}; "
                          f"train_days {cfg.train_days} must start after it (day {until + 1} "
                          "or later)")
    import torch

    from gemkd.transfer.training.latest_checkpoint import is_final

    path = Path(continue_from)
    if path.is_file() and is_final(torch.load(path, map_location="cpu", mmap=True,
                                              weights_only=False)):
        raise ConfigError(f"continue_from {continue_from}: a finished fit's checkpoint holds "
                          "the weights only (no optimizer state); continue from a streaming "
                          f"fit's checkpoint ({TeacherFitDir.DAY_NAME} or its "
                          f"{TeacherFitDir.LAST}), or start from these weights with init_from")


def _epoch_of(ckpt: Path) -> int | None:
    """The 1-based epoch a (single-file) Lightning checkpoint was saved after."""
    if not ckpt.is_file():
        return None
    import torch

    return int(torch.load(ckpt, map_location="cpu", weights_only=False)["epoch"]) + 1
