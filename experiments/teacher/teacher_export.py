"""``export_teacher``: a trained teacher's logits and one layer's embedding → a store (the
library function under ``gemkd teacher export``), and :func:`export_model`, the same for a model
already in memory (the domain FMs of hierarchical transfer).

The model is rebuilt from the run's resolved ``config.yaml`` (next to ``checkpoints/``) and its
weights are loaded from the checkpoint (a Lightning ``.ckpt`` file, or the sharded directory
that ``--strategy fsdp`` writes). Prediction runs through Lightning with ``StoreCallback``, so
the store is complete (manifest last, renamed into place) or absent.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from gemkd.experiments.teacher.teacher_config import TeacherTrainConfig, load_teacher
from gemkd.transfer.errors import ConfigError, GemkdError
from gemkd.transfer.options import EMB_DTYPES, EmbDtype
from gemkd.transfer.teacher_fit_dir import TeacherFitDir


def export_teacher(ckpt: str | Path, data: str | Path, out: str | Path, *,
                   days: tuple[int, int] | None = None, layer: str | None = None,
                   emb_dtype: EmbDtype = "float16", config: str | Path | None = None,
                   batch_size: int = 4096, devices: int = 1, num_nodes: int = 1,
                   overwrite: bool = False, progress: bool = True):
    """Write a trained teacher's outputs over a dataset into a teacher-output store.

    The model is rebuilt from the fit's resolved ``config.yaml``. The store's
    ``trained_until_day`` is the last training day (N for a streaming pass's ``day=N.ckpt``).

    Parameters
    ----------
    ckpt
        A teacher checkpoint file (a fit's ``last.ckpt``, a ``day=N.ckpt``) or a sharded
        checkpoint directory.
    data
        The dataset to run the teacher over.
    out
        The store to write (atomically).
    days
        The half-open day range to export (None: every day).
    layer
        The representation kept beside the logits (None: the config's ``repr_layer``).
    emb_dtype
        How the representation is stored: ``float16`` or ``int8``.
    config
        A teacher config to use instead of the fit's resolved ``config.yaml`` beside
        ``checkpoints/``.
    batch_size, devices, num_nodes
        The prediction loop's batch size and processes.
    overwrite
        Replace a store already at ``out``.
    progress
        Show Lightning's progress bar.

    Returns
    -------
    Manifest or None
        The store's manifest on the global-zero process; None on the others.

    Raises
    ------
    ConfigError
        A bad ``emb_dtype``, a missing checkpoint or config, days the data lacks, or weights
        that do not fit the model.
    """
    from gemkd.transfer.store import weights_hash

    _check_emb_dtype(emb_dtype)
    teacher = load_teacher(ckpt, data, config=config, days=days)
    cfg = teacher.cfg
    day = TeacherFitDir.checkpoint_day(teacher.ckpt)
    if day is not None:  # a streaming pass's day=N.ckpt has trained until day N, not to the end
        cfg = dataclasses.replace(cfg, train_days=[cfg.train_days[0], day + 1])
    return export_model(
        teacher.model, cfg, data, out, teacher_version=weights_hash(teacher.weights),
        days=days, layer=layer, emb_dtype=emb_dtype, batch_size=batch_size, devices=devices,
        num_nodes=num_nodes, overwrite=overwrite, progress=progress,
        extra={"checkpoint": str(teacher.ckpt), "data": str(data), "days": list(days or [])})


def export_model(model: torch.nn.Module, cfg: TeacherTrainConfig, data: str | Path,
                 out: str | Path, *, teacher_version: str, teacher_name: str | None = None,
                 days: tuple[int, int] | None = None, domains: list[str] | None = None,
                 layer: str | None = None, emb_dtype: EmbDtype = "float16",
                 batch_size: int = 4096, devices: int = 1, num_nodes: int = 1,
                 overwrite: bool = False, progress: bool = True,
                 extra: dict[str, Any] | None = None):
    """Write ``model`` (trained under ``cfg``: its ``accelerator``, ``precision``,
    ``max_seq_len``, ``repr_layer`` and ``train_days``) over ``data`` (``days``, default all; only
    ``domains``' rows when given) into the store ``out``, named ``teacher_name`` (default the
    config's) at ``teacher_version``. Returns the manifest (global zero; None elsewhere)."""
    from gemkd.transfer.data.datamodule import AdsDataModule
    from gemkd.transfer.data.schema import DatasetSchema
    from gemkd.transfer.store import StoreCallback
    from gemkd.transfer.training import RankingModule, make_trainer

    _check_emb_dtype(emb_dtype)
    schema = DatasetSchema.load(data)
    layer = layer or cfg.repr_layer
    teacher: Any = model  # a teacher (gemkd.transfer.models): the contract is duck-typed
    dims = teacher.representation_dims()
    if layer not in dims:
        raise ConfigError(f"--layer {layer!r}: the model's layers are {', '.join(dims)}")
    module = RankingModule(model.eval(), schema.tasks, schema.domains, repr_layer=layer,
                           compute_auc=False)
    dm = AdsDataModule(data, predict_days=days, batch_size=batch_size, shuffle=False,
                       max_seq_len=cfg.max_seq_len, domains=domains)
    callback = StoreCallback(
        out, schema.tasks, layer, dims[layer], emb_dtype,
        teacher_name=cfg.name if teacher_name is None else teacher_name,
        teacher_version=teacher_version, trained_until_day=cfg.train_days[1] - 1,
        overwrite=overwrite, extra=extra,
    )
    world = devices * num_nodes
    trainer = make_trainer(
        accelerator=cfg.accelerator, devices=devices, num_nodes=num_nodes,
        strategy="ddp" if world > 1 else "auto", precision=cfg.precision,
        callbacks=[callback], progress_bar=progress,
    )
    with torch.inference_mode():
        trainer.predict(module, datamodule=dm, return_predictions=False)
    if not trainer.is_global_zero:
        return None
    if callback.manifest is None:
        raise GemkdError(f"{out}: export finished without a manifest")
    return callback.manifest


def _check_emb_dtype(emb_dtype: str) -> None:
    if emb_dtype not in EMB_DTYPES:
        raise ConfigError(f"emb_dtype {emb_dtype!r}: expected one of {', '.join(EMB_DTYPES)}")
