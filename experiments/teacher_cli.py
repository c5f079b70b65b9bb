"""``gemkd teacher fit``: train a teacher (GEM or any model class) with Lightning.

The config is one flat YAML (``experiments/teachers/{tiny,small,base}.yaml``): ``model:`` holds
the model class's keyword hyper-parameters, every other top-level key is a
:class:`TeacherTrainConfig` field. The run directory gets ``config.yaml`` (resolved),
``metrics.csv`` (CSVLogger), ``checkpoints/last.ckpt`` (a directory under ``--strategy fsdp``)
and ``val_metrics.json`` (final validation metrics when ``val_days`` is set).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from transfer.config import build_dataclass, load_yaml
from transfer.errors import ConfigError


@dataclass
class TeacherTrainConfig:
    """Top-level keys of a teacher config (``model:`` = the model's hyper-parameters)."""

    name: str = "teacher"
    class_path: str = "teachers.GEM"
    model: dict[str, Any] = field(default_factory=dict)
    train_days: list[int] = field(default_factory=lambda: [0, 1])
    val_days: list[int] | None = None
    test_days: list[int] | None = None
    batch_size: int = 512
    max_epochs: int = 1
    max_steps: int = -1
    lr: float = 0.002
    embedding_lr: float | None = None  # None: 10 x lr
    weight_decay: float = 0.0
    grad_clip: float | None = 1.0
    task_weights: dict[str, float] | None = None
    max_seq_len: int | None = None
    seed: int = 0
    precision: str = "32-true"
    compile: bool = False
    strategy: str = "auto"
    devices: int = 1
    accelerator: str = "auto"
    num_workers: int = 0
    log_every_n_steps: int = 50
    checkpoint_every_n_steps: int | None = None
    repr_layer: str = "trunk"
    fsdp_replicate: int = 1  # > 1: hybrid sharding (replicate groups x shard) under fsdp

    def __post_init__(self) -> None:
        for key in ("train_days", "val_days", "test_days"):
            days = getattr(self, key)
            if days is not None and (len(days) != 2 or days[0] >= days[1] or days[0] < 0):
                raise ValueError(f"key {key!r} must be a half-open range [first, end) with "
                                 f"0 <= first < end, got {days}")
        for key in ("batch_size", "max_epochs", "devices", "log_every_n_steps"):
            if getattr(self, key) < 1:
                raise ValueError(f"key {key!r} must be >= 1, got {getattr(self, key)}")
        if self.max_steps < -1 or self.max_steps == 0:
            raise ValueError(f"key 'max_steps' must be -1 (no limit) or >= 1, got {self.max_steps}")
        if self.lr <= 0 or (self.embedding_lr is not None and self.embedding_lr <= 0):
            raise ValueError("keys 'lr' and 'embedding_lr' must be > 0")
        if self.strategy not in ("auto", "ddp", "fsdp"):
            raise ValueError(f"key 'strategy' must be auto, ddp or fsdp, got {self.strategy!r}")
        if self.checkpoint_every_n_steps is not None and self.checkpoint_every_n_steps < 1:
            raise ValueError("key 'checkpoint_every_n_steps' must be >= 1")
        if self.max_seq_len is not None and self.max_seq_len < 0:
            raise ValueError(f"key 'max_seq_len' must be >= 0, got {self.max_seq_len}")


def load_teacher_config(path: str | Path, overrides: dict[str, Any] | None = None
                        ) -> TeacherTrainConfig:
    values = load_yaml(path)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return build_dataclass(TeacherTrainConfig, values, source=str(path))


def model_class(class_path: str) -> type:
    module_name, _, attr = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(f"class_path {class_path!r}: no such class") from None


def build_model(cfg: TeacherTrainConfig, schema):
    cls = model_class(cfg.class_path)
    if hasattr(cls, "from_config"):
        return cls.from_config(schema, cfg.model)
    try:
        return cls(schema, **cfg.model)
    except TypeError as e:
        raise ConfigError(f"model: {e}") from None


def config_source(cfg: TeacherTrainConfig) -> str:
    return f"config {cfg.name!r}"


def build_run(cfg: TeacherTrainConfig, data: str | Path):
    """``(datamodule, module)`` for ``cfg`` on the dataset ``data``."""
    import lightning.pytorch as pl

    from transfer.data.datamodule import AdsDataModule
    from transfer.data.schema import DatasetSchema
    from transfer.training import RankingModule, training_base_rates

    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    schema = DatasetSchema.load(data)
    for key in ("train_days", "val_days", "test_days"):
        days = getattr(cfg, key)
        if days is not None and not any(days[0] <= d < days[1] for d in schema.days):
            raise ConfigError(f"{key} {days}: no such days in {data} (it has days "
                              f"{min(schema.days)}..{max(schema.days)})")
    dm = AdsDataModule(
        data, train_days=tuple(cfg.train_days),
        val_days=tuple(cfg.val_days) if cfg.val_days else None,
        test_days=tuple(cfg.test_days) if cfg.test_days else None,
        batch_size=cfg.batch_size, num_workers=cfg.num_workers, seed=cfg.seed,
        max_seq_len=cfg.max_seq_len,
    )
    for split in ("train", "val", "test"):  # open every file's footer and check its columns
        if dm.days[split] is not None:       # now: bad data fails before RUN_DIR is written
            dm.reader(split)
    model = build_model(cfg, schema)
    try:
        module = RankingModule(
            model, schema.tasks, schema.domains, lr=cfg.lr, embedding_lr=cfg.embedding_lr,
            weight_decay=cfg.weight_decay, task_weights=cfg.task_weights,
            base_rates=training_base_rates(data, cfg.train_days, schema.tasks),
            repr_layer=cfg.repr_layer, compile=cfg.compile, fsdp_replicate=cfg.fsdp_replicate,
        )
    except ValueError as e:
        raise ConfigError(f"{config_source(cfg)}: {e}") from None
    return dm, module


def teacher_fit(args: argparse.Namespace) -> None:
    from transfer.training import build_trainer, fit
    from transfer.training.trainer import throughput

    cfg = load_teacher_config(args.config, {"strategy": args.strategy, "devices": args.devices})
    out = Path(args.out)
    dm, module = build_run(cfg, args.data)
    trainer = build_trainer(
        out, strategy=cfg.strategy, devices=cfg.devices, max_epochs=cfg.max_epochs,
        precision=cfg.precision, accelerator=cfg.accelerator,
        log_every_n_steps=cfg.log_every_n_steps, max_steps=cfg.max_steps,
        checkpoint_every_n_steps=cfg.checkpoint_every_n_steps, grad_clip=cfg.grad_clip,
        progress_bar=not args.no_progress,
    )
    if trainer.is_global_zero:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    resumed = fit(module, dm, trainer, resume=args.resume)
    if cfg.val_days is not None:  # final validation, also when max_steps stopped mid-epoch
        trainer.validate(module, datamodule=dm, verbose=False)
    tp = throughput(trainer)
    summary: dict[str, Any] = {
        "global_step": trainer.global_step,
        "resumed_from": str(resumed) if resumed else None,
        "examples_per_s": (tp.examples_per_s * trainer.world_size) if tp else None,
    }
    if "val" in module.last_metrics:
        summary["val"] = module.last_metrics["val"]
    if trainer.is_global_zero:
        (out / "val_metrics.json").write_text(json.dumps(summary, indent=2))
        ne = summary.get("val", {}).get(f"ne/{module.tasks[0]}/all")
        print(f"trained {cfg.name} to step {trainer.global_step}"
              f"{f' (resumed from {resumed})' if resumed else ''}; "
              f"{summary['examples_per_s']:.0f} examples/s"
              f"{f'; val NE {module.tasks[0]} {ne:.4f}' if ne is not None else ''}; "
              f"run dir {out}", file=sys.stdout)


def add_teacher_parser(sub) -> None:
    teacher = sub.add_parser("teacher", help="train teacher models")
    tsub = teacher.add_subparsers(dest="teacher_command", required=True)
    f = tsub.add_parser("fit", help="train a teacher with Lightning (resumable)")
    f.add_argument("--config", required=True,
                   help="YAML: model: {hparams} + trainer keys (experiments/teachers/*.yaml)")
    f.add_argument("--data", required=True, help="dataset directory")
    f.add_argument("--out", required=True, help="run directory (checkpoints, metrics.csv)")
    f.add_argument("--strategy", choices=["auto", "ddp", "fsdp"], default=None,
                   help="override the config's strategy")
    f.add_argument("--devices", type=int, default=None,
                   help="override the config's devices (processes)")
    f.add_argument("--resume", action="store_true",
                   help="continue from RUN_DIR/checkpoints/last.ckpt when it exists")
    f.add_argument("--no-progress", action="store_true", help="no progress bar")
    f.set_defaults(func=teacher_fit)

    from experiments.teacher_export import add_export_parser

    add_export_parser(tsub)
