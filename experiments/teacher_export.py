"""``export_teacher``: a trained teacher's logits and one layer's embedding → a store (the
library function under ``gemkd teacher export``).

The model is rebuilt from the run's resolved ``config.yaml`` (next to ``checkpoints/``) and its
weights are loaded from the checkpoint (a Lightning ``.ckpt`` file, or the sharded directory
that ``--strategy fsdp`` writes). Prediction runs through Lightning with ``StoreCallback``, so
the store is complete (manifest last, renamed into place) or absent.
"""

from __future__ import annotations

from pathlib import Path

import torch

from experiments.teacher_checkpoint import check_checkpoint, model_weights
from experiments.teacher_config import build_model, load_teacher_config
from transfer.errors import ConfigError, GemkdError

EMB_DTYPES = ("float16", "int8")


def export_teacher(ckpt: str | Path, data: str | Path, out: str | Path, *,
                   days: tuple[int, int] | None = None, layer: str | None = None,
                   emb_dtype: str = "float16", config: str | Path | None = None,
                   batch_size: int = 4096, devices: int = 1, num_nodes: int = 1,
                   overwrite: bool = False, progress: bool = True):
    """Write the teacher at ``ckpt`` over ``data`` (the half-open ``days``, default all) into
    the store ``out``; ``layer`` defaults to the config's ``repr_layer``. Returns the store's
    manifest (on the global-zero process; None elsewhere)."""
    import lightning.pytorch as pl

    from transfer.data.datamodule import AdsDataModule
    from transfer.data.schema import DatasetSchema
    from transfer.store import StoreCallback, weights_hash
    from transfer.training import RankingModule

    if emb_dtype not in EMB_DTYPES:
        raise ConfigError(f"emb_dtype {emb_dtype!r}: expected one of {', '.join(EMB_DTYPES)}")
    ckpt = check_checkpoint(ckpt)
    config = Path(config) if config else ckpt.parent.parent / "config.yaml"
    if not config.is_file():
        raise ConfigError(f"{config}: no resolved teacher config next to the checkpoint; "
                          "pass --config")
    cfg = load_teacher_config(config)
    schema = DatasetSchema.load(data)
    if days is not None:
        schema.check_days("--days", days, data)
    model = build_model(cfg, schema)
    weights = model_weights(ckpt)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise ConfigError(f"--ckpt {ckpt}: weights do not fit the model of {config} on "
                          f"{data} ({str(e).splitlines()[1].strip()})") from None
    layer = layer or cfg.repr_layer
    dims = model.representation_dims()
    if layer not in dims:
        raise ConfigError(f"--layer {layer!r}: the model's layers are {', '.join(dims)}")
    module = RankingModule(model, schema.tasks, schema.domains, repr_layer=layer,
                           compute_auc=False)
    dm = AdsDataModule(data, predict_days=days, batch_size=batch_size, shuffle=False,
                       max_seq_len=cfg.max_seq_len)
    callback = StoreCallback(
        out, schema.tasks, layer, dims[layer], emb_dtype, teacher_name=cfg.name,
        teacher_version=weights_hash(weights), trained_until_day=cfg.train_days[1] - 1,
        overwrite=overwrite,
        extra={"checkpoint": str(ckpt), "data": str(data), "days": list(days or [])},
    )
    world = devices * num_nodes
    trainer = pl.Trainer(
        accelerator=cfg.accelerator, devices=devices, num_nodes=num_nodes,
        strategy="ddp" if world > 1 else "auto", precision=cfg.precision,
        callbacks=[callback], logger=False, enable_checkpointing=False,
        enable_progress_bar=progress, enable_model_summary=False,
    )
    with torch.inference_mode():
        trainer.predict(module, datamodule=dm, return_predictions=False)
    if not trainer.is_global_zero:
        return None
    if callback.manifest is None:
        raise GemkdError(f"{out}: export finished without a manifest")
    return callback.manifest
