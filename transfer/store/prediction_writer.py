"""Lightning callback that streams ``predict_step`` outputs into a teacher-output store.

A plain ``Callback`` on ``on_predict_batch_end``, not a ``BasePredictionWriter``: rows are keyed by
``example_id``, so the store never needs Lightning's batch indices (which an ``IterableDataset``
cannot give, and which a prediction writer asks for with a warning on every export).

Each rank feeds its own ``StoreWriter`` batch by batch, so memory stays bounded by one row group
— provided the caller runs ``trainer.predict(model, dataloaders, return_predictions=False)``;
with the default ``True`` Lightning itself keeps every prediction (a warning says so).

Rank 0 creates the staging directory and broadcasts its path in ``setup``; at the end of the
predict epoch every rank closes its writer, all ranks meet at a barrier, rank 0 deduplicates,
writes the manifest and renames the store into place, and a second barrier makes the store
visible to every rank before ``predict`` returns. An exception on a rank aborts its writer; rank
0's abort removes the staging directory, so a failed export never leaves a store at ``out_dir``.

Note: Lightning's own predict sampler (``UnrepeatedDistributedSampler``) does not pad ranks;
duplicates appear when a padding ``DistributedSampler`` is used (``use_distributed_sampler=False``
with your own sampler, or a dataset that repeats rows). Either way the store holds each
example_id once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn

from gemkd.transfer.errors import StoreError
from gemkd.transfer.io import fs
from gemkd.transfer.store.format import PREDICTION_KEYS
from gemkd.transfer.store.manifest import Manifest
from gemkd.transfer.store.store_writer import StoreWriter


class StoreCallback(Callback):
    """Write every predict batch (a dict with ``PREDICTION_KEYS`` tensors) to ``out_dir``.

    The remaining arguments are those of ``StoreWriter`` (rank and world size come from the
    trainer). After a successful ``predict``, ``manifest`` holds what rank 0 wrote.
    """

    def __init__(self, out_dir: str | Path, tasks: list[str], layer: str, emb_dim: int,
                 emb_dtype: str, teacher_name: str, teacher_version: str,
                 trained_until_day: int, rows_per_shard: int = 1 << 20,
                 row_group_rows: int = 1 << 16, overwrite: bool = False,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.out_dir = fs.as_where(out_dir)
        self._kwargs: dict[str, Any] = dict(
            tasks=list(tasks), layer=layer, emb_dim=emb_dim, emb_dtype=emb_dtype,
            teacher_name=teacher_name, teacher_version=teacher_version,
            trained_until_day=trained_until_day, rows_per_shard=rows_per_shard,
            row_group_rows=row_group_rows, overwrite=overwrite, extra=extra)
        self.writer: StoreWriter | None = None
        self.manifest: Manifest | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "predict":
            return
        rank, world = trainer.global_rank, trainer.world_size
        self.manifest = None
        writer, error = None, None
        if rank == 0:
            try:
                writer = StoreWriter(self.out_dir, rank=0, world_size=world, **self._kwargs)
            except Exception as e:  # every rank must still reach the broadcast below
                error = e
        shared = trainer.strategy.broadcast(
            {"staging": str(writer.staging_dir) if writer else None,
             "error": str(error) if error else None}, src=0)
        if error is not None:
            raise error
        if shared["error"] is not None:
            raise StoreError(f"{self.out_dir}: rank 0 could not start the export: "
                             f"{shared['error']}")
        if rank == 0:
            self.writer = writer
        else:
            self.writer = StoreWriter(self.out_dir, rank=rank, world_size=world,
                                      staging_dir=shared["staging"], **self._kwargs)

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if getattr(trainer.predict_loop, "return_predictions", False):
            rank_zero_warn("StoreCallback: trainer.predict(..., return_predictions=True) keeps "
                           "every prediction in memory; pass return_predictions=False")

    def on_predict_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        self.write_on_batch_end(trainer, pl_module, outputs, None, batch, batch_idx, dataloader_idx)

    def write_on_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           prediction: Any, batch_indices: Any, batch: Any, batch_idx: int,
                           dataloader_idx: int) -> None:
        if self.writer is None:
            raise StoreError(f"{self.out_dir}: StoreCallback used outside trainer.predict")
        if not isinstance(prediction, dict) or set(PREDICTION_KEYS) - set(prediction):
            got = sorted(prediction) if isinstance(prediction, dict) else type(prediction)
            raise StoreError(f"{self.out_dir}: predict_step must return a dict with keys "
                             f"{list(PREDICTION_KEYS)}, got {got}")
        outputs = {k: prediction[k] for k in PREDICTION_KEYS}
        emb = outputs["emb"]
        if (isinstance(emb, torch.Tensor) and emb.device.type != "cpu"
                and self._kwargs["emb_dtype"] == "float16"):
            # cast on the accelerator: half the bytes to copy to the host, same values
            outputs["emb"] = emb.detach().to(torch.float16)
        self.writer.write(**outputs)

    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.writer is None:
            return
        self.writer.close()
        trainer.strategy.barrier("store_closed")
        if trainer.global_rank == 0:
            self.manifest = self.writer.finalize()
        trainer.strategy.barrier("store_finalized")
        self.writer = None

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        self._abort()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # a predict that ended without reaching the epoch end must not leave its staging dir
        self._abort()

    def _abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
            self.writer = None
