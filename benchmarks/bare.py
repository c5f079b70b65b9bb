"""A bare PyTorch loop over the student's labels-only training: the floor ``train_student`` is
measured against (``benchmarks/bench_transfer.py``) and the reference it must match
(``tests/benchmarks/test_bare.py``). A benchmark's tool, outside the installed package.

The loop builds what ``train_student`` builds — the same seed, the same student and
``DistillModule`` (``build_module``), the same loader (``student_datamodule``), the same
optimiser (``DistillModule.configure_optimizers``: FlatAdamW, embedding and dense groups)
and the same loss (``RankingModule.loss``) — and runs ``forward, loss, zero_grad, backward,
step`` per batch with nothing else: no trainer, hooks, callbacks or logging (the weight average
of the recipe when asked: the floor a pack is measured against runs the same recipe).
Given the same batches in the same order it must give the same per-step losses and bit-identical
weights as the labels-only epoch; :class:`RawCapture` reads those off a ``train_student`` run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import lightning.pytorch as pl
import torch
from torch import Tensor

from gemkd.experiments.run.student import Inputs, StudentJob, build_module, student_datamodule
from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.datamodule import AdsDataModule
from gemkd.transfer.distill import DistillModule
from gemkd.transfer.io import fs
from gemkd.transfer.training.ema import _foreach_ema, _host_weight


@dataclass
class BareLoop:
    """The labels-only student, its optimiser and its data module, ready to train;
    ``ema_decay``: also keep the recipe's weight average (StreamEMA's warm-up rule and
    multi-tensor update, after every step; None: none)."""

    module: DistillModule
    optimizer: torch.optim.Optimizer
    datamodule: AdsDataModule
    ema_decay: float | None = None

    def run(self, batches: Iterable[Batch], device: str | torch.device | None = None
            ) -> list[Tensor]:
        """One pass over ``batches`` (moved to ``device`` when given; the module must be there
        already); the per-step losses, detached (no host sync per step). With ``ema_decay``
        the average is put in place of the trained weights at the end, as a fit does."""
        module, opt = self.module, self.optimizer
        model = module.model
        trained = [p for p in model.parameters() if p.requires_grad]
        average = [p.detach().clone() for p in trained]
        losses = []
        for n, batch in enumerate(batches):
            if device is not None:
                batch = batch.to(device)
            logits = model(batch).logits
            loss, _ = module.loss(logits, batch.labels, module.label_mask(batch))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if self.ema_decay is not None:
                with torch.no_grad():
                    current = [p.detach() for p in trained]
                    if n == 0:
                        torch._foreach_copy_(average, current)
                    else:
                        _foreach_ema(average, current,
                                     _host_weight(self.ema_decay, n, average[0].dtype))
            losses.append(loss.detach())
        if self.ema_decay is not None and losses:
            with torch.no_grad():
                torch._foreach_copy_([p.data for p in trained], average)
        return losses


def bare_loop(spec: RunSpec, job: StudentJob, data: fs.Where, inputs: Inputs,
              base_rates: dict[str, float], ema: bool = False) -> BareLoop:
    """The loop for a labels-only ``job`` (a variant without methods), set up as
    ``train_student`` sets up its fit: seeded, then built; ``ema``: with the spec's weight
    average (``spec.ema_decay``)."""
    if job.variant.methods:
        raise ValueError(f"the bare loop trains labels only; variant {job.variant.name!r} has "
                         f"methods {[m.class_path for m in job.variant.methods]}")
    pl.seed_everything(job.seed, verbose=False)
    module, _ = build_module(spec, job, data, inputs, base_rates)
    module.train()
    optimizers = module.configure_optimizers()
    if len(optimizers) != 1:
        raise ValueError("a labels-only DistillModule has exactly one optimiser")
    return BareLoop(module, optimizers[0], student_datamodule(spec, job, data, module.model),
                    spec.ema_decay if ema else None)


class RawCapture(pl.Callback):
    """Per-step training losses and the student's raw weights at the end of the training
    epoch (before a weight average is copied in at the end of fit)."""

    def __init__(self) -> None:
        self.losses: list[Tensor] = []
        self.weights: dict[str, Tensor] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.losses.append(loss.detach())

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.weights = {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()}


def compare(losses_a: list[Tensor], weights_a: dict[str, Tensor], losses_b: list[Tensor],
            weights_b: dict[str, Tensor]) -> dict[str, float | bool | int]:
    """``steps``, ``max_loss_diff``, ``max_weight_diff`` (abs) and ``identical`` (same step
    count, every loss and every weight tensor bit-equal)."""
    same_steps = len(losses_a) == len(losses_b) and set(weights_a) == set(weights_b)
    loss_diff = max((float((a - b).abs()) for a, b in zip(losses_a, losses_b, strict=False)),
                    default=0.0)
    weight_diff = max((float((weights_a[k].double() - weights_b[k].double()).abs().max())
                       for k in weights_a if k in weights_b and weights_a[k].numel()),
                      default=0.0)
    identical = same_steps and all(torch.equal(a, b) for a, b in zip(losses_a, losses_b,
                                                                      strict=False)) \
        and all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    return {"steps": len(losses_a), "max_loss_diff": loss_diff, "max_weight_diff": weight_diff,
            "identical": bool(identical)}
