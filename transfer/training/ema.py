"""An exponential moving average of the weights for one streaming pass.

Lightning's ``EMAWeightAveraging`` starts its average at the first step's weights and forgets
them with a fixed decay: on a short stream (a student's few hundred steps) a fifth of the final
average can still be near-initial weights. This uses the warm-up rule of TensorFlow's
``ExponentialMovingAverage`` (``num_updates``): the decay at update ``n`` is
``min(decay, (1 + n) / (10 + n))``, so early weights are forgotten fast and the configured decay
holds once the stream is long enough. Everything else is Lightning's ``WeightAveraging`` (the
averaged copy is swapped in at the end of fit, so test/predict use it).
"""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import WeightAveraging
from lightning.pytorch.strategies import ModelParallelStrategy


def warmup_ema_fn(decay: float):
    """``avg_fn`` for ``torch.optim.swa_utils.AveragedModel`` with the warm-up rule."""
    if not 0.0 < decay < 1.0:
        raise ValueError(f"ema decay must be in (0, 1), got {decay}")

    @torch.no_grad()
    def update(avg: torch.Tensor, current: torch.Tensor, num_averaged: torch.Tensor):
        n = torch.as_tensor(num_averaged, dtype=avg.dtype, device=avg.device)
        d = torch.clamp((1 + n) / (10 + n), max=decay)
        return avg + (current - avg) * (1 - d)

    return update


class StreamEMA(WeightAveraging):
    """EMA of the weights, updated after every optimizer step, with the warm-up rule above."""

    def __init__(self, decay: float) -> None:
        super().__init__(avg_fn=warmup_ema_fn(decay), use_buffers=True)
        self.decay = decay

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        return step_idx is not None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Lightning warns on every fit of a module that overrides ``configure_model`` (gemkd's
        modules do, to shard under fsdp) that the average cannot be sharded. The average here
        refuses sharded training outright, and ``configure_model`` of an unsharded module only
        builds what the average must copy; so that warning can never apply and is not shown."""
        if stage == "fit" and isinstance(trainer.strategy, ModelParallelStrategy):
            raise ValueError("StreamEMA keeps a whole copy of the weights; it does not run under "
                             "the fsdp (ModelParallel) strategy")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"You're using the WeightAveraging callback "
                                    r"with a model that overrides the configure_model")
            super().setup(trainer, pl_module, stage)
