"""A teacher's training config: one flat YAML (``experiments/teacher/configs/*.yaml``).

``model:`` holds the model class's keyword hyper-parameters; every other top-level key is a
:class:`TeacherTrainConfig` field (docs/reference/teacher.md). Configs are named (a file in
``experiments/teacher/configs``: :data:`TEACHER_CONFIGS`) or given as a path to any YAML file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from gemkd.transfer.config import build_dataclass, load_yaml
from gemkd.transfer.constraints import Rule, at_least, check_fields, half_open
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import (
    Accelerator,
    EpochSelect,
    Precision,
    Strategy,
    TableOptimizer,
)

if TYPE_CHECKING:
    import torch

    from gemkd.transfer.data.schema import DatasetSchema

EXPERIMENTS = Path(__file__).resolve().parents[1]
#: the shipped teacher configs' folder under :data:`EXPERIMENTS` (``find_config(name,
#: TEACHER_CONFIGS)``)
TEACHER_CONFIGS = "teacher/configs"

#: the rules of a teacher config's keys (read by gemkd.transfer.constraints.check_fields)
Days = Annotated[list[int], half_open("key {key!r} must be a half-open range [first, end) with "
                                      "0 <= first < end, got {value}", first=0)]
AtLeast1 = Annotated[int, at_least(1, "key {key!r} must be >= 1, got {value}")]
_READERS = at_least(0, "keys 'prefetch' and 'num_workers' must be >= 0, got {obj.prefetch} and "
                       "{obj.num_workers}")
_LR = Rule(lambda v: v > 0, "keys 'lr' and 'embedding_lr' must be > 0")
_DECAY = at_least(0, "keys 'weight_decay' and 'embedding_weight_decay' must be >= 0")
_MAX_STEPS = Rule(lambda v: v == -1 or v >= 1,
                  "key 'max_steps' must be -1 (no limit) or >= 1, got {value}")
_PATIENCE = at_least(1, "key 'patience' must be >= 1, got {value}")
_SEQ_LEN = at_least(0, "key 'max_seq_len' must be >= 0, got {value}")
_EVERY = at_least(1, "key 'checkpoint_every_n_steps' must be >= 1")
_MIN_ROWS = at_least(0, "key 'table_min_rows' must be >= 0, got {value}")


@dataclass
class TeacherTrainConfig:
    """Top-level keys of a teacher config (``model:`` = the model's hyper-parameters)."""

    name: str = "teacher"
    class_path: str = "gemkd.teachers.GEM"
    model: dict[str, Any] = field(default_factory=dict)
    train_days: Days = field(default_factory=lambda: [0, 1])
    val_days: Days | None = None
    test_days: Days | None = None
    batch_size: AtLeast1 = 512
    max_epochs: AtLeast1 = 1
    max_steps: Annotated[int, _MAX_STEPS] = -1
    lr: Annotated[float, _LR] = 0.002
    embedding_lr: Annotated[float, _LR] | None = None  # None: 10 x lr
    weight_decay: Annotated[float, _DECAY] = 0.0
    # AdamW decay of the ID tables (regularises them)
    embedding_weight_decay: Annotated[float, _DECAY] = 0.0
    # how the ID tables are updated: rowwise_adagrad or sparse_adam (only the rows a batch
    # looked up, at embedding_lr) or dense_adamw (every row, every step); one process only
    table_optimizer: TableOptimizer = "dense_adamw"
    # smaller tables stay dense under a row-wise table_optimizer
    table_min_rows: Annotated[int, _MIN_ROWS] = 1024
    init_output_bias: bool = True  # output biases start at the training base rate's logit
    # a gemkd teacher checkpoint whose model weights start this model (fine-tuning, recurring
    # training; in a spec's `hierarchical` section `gem` = the lag's GEM checkpoint); a teacher
    # fit keeps the output biases as loaded (a domain FM's fit starts them at its domain's rate)
    init_from: str | None = None
    # one time-ordered pass over train_days (days in order, shuffled within each day) with a
    # checkpoint at the end of every day (checkpoints/day=N.ckpt): recurring training, as
    # production trains a foundation model (DESIGN §6.1, the streaming protocol)
    stream: bool = False
    # a gemkd teacher checkpoint this fit continues: its weights and optimizer state, trained
    # on days before train_days (an earlier stream's last.ckpt or day=N.ckpt)
    continue_from: str | None = None
    # best: keep the epoch with the lowest validation loss
    select: EpochSelect = "last"
    # stop after this many epochs without a better validation loss
    patience: Annotated[int, _PATIENCE] | None = None
    grad_clip: float | None = 1.0
    task_weights: dict[str, float] | None = None
    max_seq_len: Annotated[int, _SEQ_LEN] | None = None
    seed: int = 0
    precision: Precision = "auto"  # bf16-mixed on a CUDA device, 32-true on the CPU
    compile: bool = False
    strategy: Strategy = "auto"
    devices: AtLeast1 = 1
    num_nodes: AtLeast1 = 1
    accelerator: Accelerator = "auto"
    # DataLoader worker processes reading row groups side by side, each batch handed over as one
    # shared buffer and pinned when CUDA is present (a GPU fit: 4); row groups are dealt to the
    # workers, so the batches' order depends on it
    num_workers: Annotated[int, _READERS] = 0
    # training batches read ahead in a background thread (num_workers 0), overlapping the
    # Parquet read with the step: same batches, same order (0: read on demand)
    prefetch: Annotated[int, _READERS] = 0
    log_every_n_steps: AtLeast1 = 50
    checkpoint_every_n_steps: Annotated[int, _EVERY] | None = None
    repr_layer: str = "trunk"
    fsdp_replicate: int = 1  # > 1: hybrid sharding (replicate groups x shard) under fsdp

    def __post_init__(self) -> None:
        check_fields(self)
        if (self.select == "best" or self.patience is not None) and self.val_days is None:
            raise ValueError("keys 'select: best' and 'patience' need 'val_days' (the epoch is "
                             "chosen on validation days)")
        if self.stream and (self.max_epochs != 1 or self.select != "last"
                            or self.patience is not None):
            raise ValueError("key 'stream: true' is one pass over the days: it needs "
                             "max_epochs: 1, select: last and no patience (got max_epochs "
                             f"{self.max_epochs}, select {self.select!r}, patience "
                             f"{self.patience})")
        if self.continue_from is not None and self.init_from is not None:
            raise ValueError("keys 'continue_from' and 'init_from' both start the model's "
                             "weights: give one")
        if self.table_optimizer != "dense_adamw" and self.strategy != "auto":
            raise ValueError(f"key 'table_optimizer: {self.table_optimizer}' updates tables "
                             f"from row-sparse gradients, which strategy {self.strategy!r} does "
                             "not reduce or shard: use strategy auto or table_optimizer "
                             "dense_adamw")


#: keys that change how fast a fit runs, never what it trains (the same batches in the same
#: order): left out of a cached fit's key, so a cached teacher stays valid when they change
SPEED_ONLY_KEYS = ("prefetch",)


def cache_key(cfg: TeacherTrainConfig) -> dict[str, Any]:
    """``cfg`` as a cached step's key: every field but :data:`SPEED_ONLY_KEYS`."""
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in SPEED_ONLY_KEYS}


def find_config(name: str, folder: str, base: Path | None = None) -> Path:
    """A config named ``name`` in ``experiments/<folder>`` (``small`` → ``small.yaml``), or
    ``name`` as a path to a YAML file (absolute, relative to the working directory, or relative
    to ``base``, e.g. the spec's folder)."""
    named = EXPERIMENTS / folder / f"{name}.yaml"
    if "/" not in name and not name.endswith((".yaml", ".yml")):
        if named.is_file():
            return named
        known = sorted(p.stem for p in (EXPERIMENTS / folder).glob("*.yaml"))
        raise ConfigError(f"{folder} config {name!r}: no such config (named configs: "
                          f"{', '.join(known)}; or give a path to a YAML file)")
    for candidate in (Path(name), *(() if base is None else (base / name,))):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"{folder} config {name!r}: file not found")


def load_teacher_config(path: str | Path, overrides: dict[str, Any] | None = None
                        ) -> TeacherTrainConfig:
    """Read a teacher config YAML into a checked :class:`TeacherTrainConfig`.

    Parameters
    ----------
    path
        The YAML file (:func:`find_config` resolves names such as ``small``).
    overrides
        Keys replacing the file's; a None value leaves the file's.

    Returns
    -------
    TeacherTrainConfig

    Raises
    ------
    ConfigError
        Naming the file and key: an unknown key, a wrong type or a broken rule.
    """
    values = load_yaml(path)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return build_dataclass(TeacherTrainConfig, values, source=str(path))


def build_model(cfg: TeacherTrainConfig, schema):
    """The config's teacher model for ``schema``."""
    from gemkd.teachers.teacher_registry import build_teacher

    try:
        model = build_teacher(cfg.class_path, schema, cfg.model)
    except TypeError as e:
        raise ConfigError(f"model: {e}") from None
    if cfg.init_from is not None:
        load_weights(model, cfg.init_from)
    if cfg.continue_from is not None:
        load_weights(model, cfg.continue_from, "continue_from")
    return model


@dataclass
class TrainedTeacher:
    """A teacher rebuilt from its checkpoint: the model (weights loaded, in train mode as built),
    its config, the dataset's schema, the weights and the checkpoint they came from."""

    model: torch.nn.Module
    cfg: TeacherTrainConfig
    schema: DatasetSchema
    weights: dict[str, torch.Tensor]
    ckpt: Path


def load_teacher(ckpt: str | Path, data: Any, *, config: str | Path | None = None,
                 days: tuple[int, int] | None = None) -> TrainedTeacher:
    """The teacher at ``ckpt`` rebuilt for the dataset ``data``: its config is ``config``
    (default: the run's resolved ``config.yaml`` beside ``checkpoints/``), ``days`` (if given)
    are checked against the data, and the checkpoint's weights must fit the model (each a
    ConfigError otherwise). ``init_from`` is not reloaded: the checkpoint's weights replace it."""
    from gemkd.experiments.teacher.teacher_checkpoint import check_checkpoint, model_weights
    from gemkd.transfer.data.schema import DatasetSchema
    from gemkd.transfer.teacher_fit_dir import TeacherFitDir

    ckpt = check_checkpoint(ckpt)
    config = Path(config) if config else TeacherFitDir.of_checkpoint(ckpt).config_file
    if not config.is_file():
        raise ConfigError(f"{config}: no resolved teacher config next to the checkpoint; "
                          "pass --config")
    cfg = load_teacher_config(config)
    schema = DatasetSchema.load(data)
    if days is not None:
        schema.check_days("--days", days, data)
    model = build_model(dataclasses.replace(cfg, init_from=None, continue_from=None), schema)
    weights = model_weights(ckpt)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise ConfigError(f"--ckpt {ckpt}: weights do not fit the model of {config} on "
                          f"{data} ({str(e).splitlines()[1].strip()})") from None
    return TrainedTeacher(model, cfg, schema, weights, ckpt)


def load_weights(model, ckpt: str | Path, what: str = "init_from") -> None:
    """Start ``model`` from a checkpoint's model weights; a checkpoint of another architecture
    (missing, unexpected or differently shaped tensors) is a ConfigError that names them."""
    from gemkd.experiments.teacher.teacher_checkpoint import model_weights

    weights = model_weights(ckpt, what)
    own = model.state_dict()
    missing = sorted(set(own) - set(weights))
    unexpected = sorted(set(weights) - set(own))
    shapes = sorted(k for k in set(own) & set(weights) if own[k].shape != weights[k].shape)
    if missing or unexpected or shapes:
        def few(keys: list[str]) -> str:
            return ", ".join(keys[:3]) + (f" (+{len(keys) - 3} more)" if len(keys) > 3 else "")
        parts = [f"{what}: {few(keys)}" for what, keys in
                 (("missing", missing), ("unexpected", unexpected),
                  ("other shape", [f"{k} {tuple(weights[k].shape)} vs {tuple(own[k].shape)}"
                                   for k in shapes])) if keys]
        raise ConfigError(f"{what} {ckpt}: its weights do not fit this model "
                          f"({type(model).__name__} as configured): {'; '.join(parts)}")
    model.load_state_dict(weights)


def build_run(cfg: TeacherTrainConfig, data: str | Path, *, domains: list[str] | None = None,
              distill_from: str | Path | None = None):
    """``(datamodule, module)`` for ``cfg`` on the dataset ``data``; every split's files are
    opened (footers, columns) here, so bad data fails before a run directory is written.

    ``domains`` keeps only those domains' rows (training, validation, the base rates);
    ``distill_from`` (a teacher-output store) trains the model on its labels plus KD from that
    store (λ = 1), as a student is trained (``DistillModule``: a domain FM of hierarchical
    transfer); its output biases then start at the base rates even after ``init_from``."""
    import lightning.pytorch as pl

    from gemkd.transfer.data.datamodule import AdsDataModule
    from gemkd.transfer.data.schema import DatasetSchema, day_range
    from gemkd.transfer.training import RankingModule, training_rates

    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    schema = DatasetSchema.load(data)
    for key in ("train_days", "val_days", "test_days"):
        if getattr(cfg, key) is not None:
            schema.check_days(key, getattr(cfg, key), data)
    dm = AdsDataModule(
        data, train_days=day_range(cfg.train_days),
        val_days=day_range(cfg.val_days) if cfg.val_days else None,
        test_days=day_range(cfg.test_days) if cfg.test_days else None,
        batch_size=cfg.batch_size, num_workers=cfg.num_workers, seed=cfg.seed,
        prefetch=cfg.prefetch, max_seq_len=cfg.max_seq_len, domains=domains, stream=cfg.stream,
    )
    for split in ("train", "val", "test"):
        if dm.days[split] is not None:
            dm.reader(split)
    model = build_model(cfg, schema)
    base_rates, domain_base_rates = training_rates(data, cfg.train_days, schema.tasks, domains)
    args: dict[str, Any] = dict(
        lr=cfg.lr, embedding_lr=cfg.embedding_lr, weight_decay=cfg.weight_decay,
        embedding_weight_decay=cfg.embedding_weight_decay, task_weights=cfg.task_weights,
        table_optimizer=cfg.table_optimizer, table_min_rows=cfg.table_min_rows,
        base_rates=base_rates, domain_base_rates=domain_base_rates,
        repr_layer=cfg.repr_layer, compile=cfg.compile, fsdp_replicate=cfg.fsdp_replicate)
    try:
        if distill_from is None:
            module = RankingModule(model, schema.tasks, schema.domains, **args,
                                   init_output_bias=cfg.init_output_bias and cfg.init_from is None
                                   and cfg.continue_from is None)
        else:
            from gemkd.transfer.distill import DistillModule, StoreTeacher
            from gemkd.transfer.methods import KD
            from gemkd.transfer.store import TeacherStore

            teacher = StoreTeacher(TeacherStore(distill_from), schema.tasks)
            module = DistillModule(model, schema.tasks, schema.domains,
                                   methods=[KD(kd_weight=1.0)], teacher=teacher,
                                   grad_clip=cfg.grad_clip, compute_auc=False,
                                   init_output_bias=cfg.init_output_bias, **args)
    except ValueError as e:
        raise ConfigError(f"config {cfg.name!r}: {e}") from None
    return dm, module
