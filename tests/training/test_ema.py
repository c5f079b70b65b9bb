"""The streaming EMA: warm-up rule values, and the averaged weights are what fit leaves behind."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from transfer.training.ema import StreamEMA, warmup_ema_fn


def test_warmup_rule():
    fn = warmup_ema_fn(0.98)
    avg, cur = torch.zeros(3), torch.ones(3)
    # n=0: decay 1/10 -> 90% of the new value; n=1000: capped at 0.98 -> 2%
    assert torch.allclose(fn(avg, cur, torch.tensor(0)), torch.full((3,), 0.9))
    assert torch.allclose(fn(avg, cur, torch.tensor(1000)), torch.full((3,), 0.02))
    with pytest.raises(ValueError, match="decay"):
        warmup_ema_fn(1.0)


class _Lin(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Linear(1, 1, bias=False)
        self.seen: list[float] = []

    def training_step(self, batch, idx):
        x, y = batch
        return ((self.w(x) - y) ** 2).mean()

    def on_train_batch_end(self, *args) -> None:
        self.seen.append(float(self.w.weight))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def test_fit_ends_on_the_running_average():
    torch.manual_seed(0)
    x = torch.randn(64, 1)
    data = DataLoader(TensorDataset(x, 3 * x + torch.randn(64, 1)), batch_size=4)
    model = _Lin()
    pl.Trainer(max_epochs=1, callbacks=[StreamEMA(0.9)], logger=False,
               enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False).fit(model, data)
    expect, fn = None, warmup_ema_fn(0.9)
    for n, w in enumerate(model.seen):
        t = torch.tensor([w])
        expect = t if expect is None else fn(expect, t, torch.tensor(n))
    assert float(model.w.weight) == pytest.approx(float(expect), rel=1e-5)
    assert float(model.w.weight) != pytest.approx(model.seen[-1], rel=1e-3)
