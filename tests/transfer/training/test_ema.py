"""The streaming EMA: warm-up rule values, the multi-tensor update equals the per-tensor maths,
and the averaged weights are what fit leaves behind."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch.optim.swa_utils import AveragedModel
from torch.utils.data import DataLoader, TensorDataset

from gemkd.transfer.training.ema import (
    StreamEMA,
    _host_weight,
    _weight,
    warmup_ema_fn,
    warmup_ema_multi_fn,
)


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


def test_multi_tensor_update_is_the_per_tensor_maths():
    """The foreach update StreamEMA runs equals the per-tensor warm-up rule, bit for bit, for
    float and integer tensors, from the first update on (where the warm-up decides the decay)."""
    decay = 0.98
    ref, multi = warmup_ema_fn(decay), warmup_ema_multi_fn(decay)
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.int64):
        start = [torch.randint(0, 50, (5, 3), generator=g).to(dtype) for _ in range(3)]
        want, got = [t.clone() for t in start], [t.clone() for t in start]
        for n in range(1, 400):  # decay reaches 0.98 at n = 440: every step here is warm-up
            step = [t + torch.randint(-9, 9, t.shape, generator=g).to(dtype) for t in start]
            for w, s in zip(want, step, strict=True):
                w.copy_(ref(w, s, torch.tensor(n)))
            multi(got, step, torch.tensor(n))
            for w, h in zip(want, got, strict=True):
                assert torch.equal(w, h), (dtype, n)
    # the rule itself: n = 0 keeps 10% of the old average, large n the configured decay
    avg = [torch.zeros(3)]
    multi(avg, [torch.ones(3)], torch.tensor(0))
    assert torch.allclose(avg[0], torch.full((3,), 0.9), atol=1e-6)
    avg = [torch.zeros(3)]
    multi(avg, [torch.ones(3)], torch.tensor(1000))
    assert torch.allclose(avg[0], torch.full((3,), 0.02), atol=1e-6)
    with pytest.raises(ValueError, match="decay"):
        warmup_ema_multi_fn(0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bfloat16])
def test_host_weight_rounds_as_torch(dtype):
    for n in [1, 2, 3, 7, 50, 439, 440, 441, 10_000]:
        want = _weight(0.98, torch.tensor(n), torch.empty((), dtype=dtype))
        assert _host_weight(0.98, n, dtype) == float(want), (dtype, n)


class _WithIntBuffer(_Lin):
    def __init__(self) -> None:
        super().__init__()
        self.w2 = torch.nn.Linear(2, 1)
        self.register_buffer("index", torch.tensor([3, 1]))

    def training_step(self, batch, idx):
        x, y = batch
        return ((self.w(x) + self.w2(torch.cat([x, x], 1)) - y) ** 2).mean()


def _fit_beside_averaged_model(model, seed: int):
    """Fit ``model`` one epoch with StreamEMA(0.9) while torch's AveragedModel with the
    per-tensor warm-up function follows every step: ``(ema, ref, got, want)``, the last two
    the named parameters and buffers of the EMA-swapped model and of the reference."""
    torch.manual_seed(seed)
    x = torch.randn(64, 1)
    data = DataLoader(TensorDataset(x, 3 * x + torch.randn(64, 1)), batch_size=4)
    ref = AveragedModel(model, use_buffers=True, avg_fn=warmup_ema_fn(0.9))

    class Follow(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, *args) -> None:
            ref.update_parameters(pl_module)

    ema = StreamEMA(0.9)
    pl.Trainer(max_epochs=1, callbacks=[Follow(), ema], logger=False, enable_checkpointing=False,
               enable_progress_bar=False, enable_model_summary=False).fit(model, data)
    got = dict(model.named_parameters()) | dict(model.named_buffers())
    want = dict(ref.module.named_parameters()) | dict(ref.module.named_buffers())
    return ema, ref, got, want


def test_stream_ema_fit_equals_averaged_model_with_the_per_tensor_fn():
    """StreamEMA's fast update over a fit gives what torch's AveragedModel computes with the
    per-tensor warm-up function on the same weights, step by step (within 1e-6; in fact equal)."""
    ema, ref, got, want = _fit_beside_averaged_model(_WithIntBuffer(), seed=0)
    assert ema._groups is not None  # the fast path ran
    assert int(ema._average_model.n_averaged) == int(ref.n_averaged) == 16
    for name, value in want.items():
        assert torch.allclose(got[name].double(), value.double(), rtol=0, atol=1e-6), name
        assert torch.equal(got[name], value), name


class _ChangingBuffers(_WithIntBuffer):
    """Float64 parameters beside float32 ones (two flat groups), an integer buffer that moves
    mid-fit (no longer the update's fixed point) and a non-persistent float buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.w3 = torch.nn.Linear(1, 1).double()
        self.register_buffer("scale", torch.ones(2), persistent=False)

    def training_step(self, batch, idx):
        if idx == 5:
            self.index.add_(7)
            self.scale.mul_(1.5)
        x, y = batch
        return super().training_step(batch, idx) + ((self.w3(x.double()) - y.double()) ** 2).mean()


def test_stream_ema_flat_groups_and_moving_integer_buffer_equal_the_reference():
    model = _ChangingBuffers()
    ema, _, got, want = _fit_beside_averaged_model(model, seed=1)
    assert {flat.dtype for flat, _, _ in ema._flat} == {torch.float32, torch.float64}
    assert int(want["index"][0]) != 3  # the average followed the moved index
    for name, value in want.items():
        assert torch.equal(got[name], value), name
    # the averaged module's tensors are views of the flat buffers, its state dict as before
    avg = ema._average_model.module
    assert set(avg.state_dict()) == set(model.state_dict())
    assert any(p.untyped_storage().data_ptr() == ema._flat[0][0].untyped_storage().data_ptr()
               for p in avg.parameters())
