"""``gemkd teacher export``: a trained teacher's logits and one layer's embedding → a store.

The model is rebuilt from the run's resolved ``config.yaml`` (next to ``checkpoints/``) and its
weights are loaded from ``--ckpt`` (a Lightning ``.ckpt`` file, or the sharded directory that
``--strategy fsdp`` writes). Prediction runs through Lightning with ``StoreCallback``, so the
store is complete (manifest last, renamed into place) or absent.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import torch

from experiments.teacher_cli import build_model, load_teacher_config
from transfer.errors import ConfigError, GemkdError

EMB_DTYPES = ("float16", "int8")


def parse_days(text: str | None) -> tuple[int, int] | None:
    """``"A:B"`` → the half-open day range ``(A, B)``."""
    if text is None:
        return None
    first, sep, end = text.partition(":")
    try:
        days = (int(first), int(end))
    except ValueError:
        days = None
    if not sep or days is None or days[0] >= days[1] or days[0] < 0:
        raise ConfigError(f"--days {text!r}: expected A:B with 0 <= A < B (half-open)")
    return days


def _read_checkpoint(ckpt: Path) -> dict:
    if ckpt.is_dir():  # FSDP2 / distributed-checkpoint directory
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            flat = Path(tmp) / "consolidated.pt"
            dcp_to_torch_save(ckpt, flat)
            return torch.load(flat, map_location="cpu", weights_only=False)
    return torch.load(ckpt, map_location="cpu", weights_only=False)


def model_weights(ckpt: Path) -> dict[str, torch.Tensor]:
    """The model's state dict from a RankingModule checkpoint (keys without ``model.``)."""
    if not ckpt.exists():
        raise ConfigError(f"--ckpt {ckpt}: no such checkpoint")
    try:
        raw = _read_checkpoint(ckpt)
    except Exception as e:  # torch raises many types for a damaged file
        raise ConfigError(f"--ckpt {ckpt}: unreadable checkpoint ({str(e).splitlines()[0]})"
                          ) from None
    state = raw.get("state_dict", raw.get("model", raw)) if isinstance(raw, dict) else None
    weights = {k[len("model."):]: v for k, v in (state or {}).items()
               if k.startswith("model.") and isinstance(v, torch.Tensor)}
    if not weights:
        raise ConfigError(f"--ckpt {ckpt}: no model weights (expected a gemkd teacher "
                          "checkpoint with 'model.*' entries)")
    return weights


def teacher_export(args: argparse.Namespace) -> None:
    import lightning.pytorch as pl

    from transfer.data.datamodule import AdsDataModule
    from transfer.data.schema import DatasetSchema
    from transfer.store import StoreCallback, weights_hash
    from transfer.training import RankingModule

    ckpt = Path(args.ckpt)
    config = Path(args.config) if args.config else ckpt.parent.parent / "config.yaml"
    if not config.is_file():
        raise ConfigError(f"{config}: no resolved teacher config next to the checkpoint; "
                          "pass --config")
    cfg = load_teacher_config(config)
    days = parse_days(args.days)
    schema = DatasetSchema.load(args.data)
    model = build_model(cfg, schema)
    weights = model_weights(ckpt)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise ConfigError(f"--ckpt {ckpt}: weights do not fit the model of {config} on "
                          f"{args.data} ({str(e).splitlines()[1].strip()})") from None
    layer = args.layer or cfg.repr_layer
    dims = model.representation_dims()
    if layer not in dims:
        raise ConfigError(f"--layer {layer!r}: the model's layers are {', '.join(dims)}")
    module = RankingModule(model, schema.tasks, schema.domains, repr_layer=layer,
                           compute_auc=False)
    dm = AdsDataModule(args.data, predict_days=days, batch_size=args.batch_size,
                       shuffle=False, max_seq_len=cfg.max_seq_len)
    callback = StoreCallback(
        args.out, schema.tasks, layer, dims[layer], args.emb_dtype, teacher_name=cfg.name,
        teacher_version=weights_hash(weights), trained_until_day=cfg.train_days[1] - 1,
        overwrite=args.overwrite,
        extra={"checkpoint": str(ckpt), "data": str(args.data), "days": list(days or [])},
    )
    trainer = pl.Trainer(
        accelerator=cfg.accelerator, devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto", precision=cfg.precision,
        callbacks=[callback], logger=False, enable_checkpointing=False,
        enable_progress_bar=not args.no_progress, enable_model_summary=False,
    )
    with torch.inference_mode(), warnings.catch_warnings():
        # rows are identified by example_id (the store dedupes by it), not by batch indices
        warnings.filterwarnings("ignore", message="Couldn't infer the batch indices")
        trainer.predict(module, datamodule=dm, return_predictions=False)
    if trainer.is_global_zero:
        m = callback.manifest
        if m is None:
            raise GemkdError(f"{args.out}: export finished without a manifest")
        print(f"exported {m.total_rows} rows ({len(m.shards)} shards, layer {layer!r}, "
              f"{args.emb_dtype}) of teacher {m.teacher_name} {m.teacher_version[:12]} "
              f"to {args.out}")


def add_export_parser(tsub) -> None:
    e = tsub.add_parser("export", help="write a teacher's logits and embeddings to a store")
    e.add_argument("--ckpt", required=True, help="RUN_DIR/checkpoints/last.ckpt (or FSDP dir)")
    e.add_argument("--data", required=True, help="dataset directory")
    e.add_argument("--out", required=True, help="store directory to create")
    e.add_argument("--days", default=None, help="half-open day range A:B (default: all)")
    e.add_argument("--layer", default=None,
                   help="named representation to store (default: the config's repr_layer)")
    e.add_argument("--emb-dtype", choices=EMB_DTYPES, default="float16")
    e.add_argument("--config", default=None,
                   help="teacher config (default: RUN_DIR/config.yaml beside the checkpoint)")
    e.add_argument("--batch-size", type=int, default=4096)
    e.add_argument("--devices", type=int, default=1, help="processes (DDP) for prediction")
    e.add_argument("--overwrite", action="store_true", help="replace an existing store")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=teacher_export)
