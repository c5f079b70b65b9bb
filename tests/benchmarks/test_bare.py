"""The labels-only student epoch is the bare PyTorch loop (``benchmarks/bare.py``, the floor of
``benchmarks/bench_transfer.py``): same per-step losses, bit-identical raw weights; Lightning's
wrappers are bypassed only where they are inert, with the same result."""

from __future__ import annotations

import dataclasses

import lightning.pytorch as pl
import pytest
import torch

from benchmarks.bare import RawCapture, bare_loop, compare
from gemkd.experiments.run.student import Inputs, StudentJob, build_module, train_student
from gemkd.experiments.spec import load_spec
from gemkd.transfer.distill.manual_step import wrappers_inert
from gemkd.transfer.training import training_base_rates

SETS = ["data.preset=tiny", "teacher_days=3", "student_days=[3,5]", "eval_days=[5,6]",
        "batch_size=128", "student={class_path: mlp, init_args: {hidden: [8], embedding_dim: 4}}"]


@pytest.fixture
def world(tiny_data):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    spec = load_spec(None, SETS)
    job = StudentJob(spec.variant("baseline"), {}, 0, (3, 5), (5, 6), 2)
    rates = training_base_rates(tiny_data, job.train_days, list(spec.student_tasks),
                                [spec.student_domain])
    yield spec, job, tiny_data, Inputs({}), rates
    torch.set_num_threads(threads)


class _Probe(RawCapture):
    """Also records whether the student's step took the plain path."""

    def on_train_end(self, trainer, pl_module) -> None:
        self.plain = pl_module._manual_step._plain


class _WatchesGradients(_Probe):
    """Overrides a backward hook, so the step must go through Lightning's wrappers."""

    def on_after_backward(self, trainer, pl_module) -> None:
        self.seen = True


def _bare(spec, job, data, inputs, rates):
    loop = bare_loop(spec, job, data, inputs, rates)
    losses = loop.run(list(loop.datamodule.train_dataloader()))
    return losses, {k: v.detach().clone() for k, v in loop.module.model.state_dict().items()}


def test_labels_only_epoch_is_the_bare_loop(world):
    assert world[0].ema_decay is not None  # the average runs, and leaves the raw weights alone
    probe = _Probe()
    train_student(*world, callbacks=[probe])
    assert probe.plain  # CPU, fp32, one device, no hooks: the plain step
    got = compare(probe.losses, probe.weights, *_bare(*world))
    assert got["steps"] > 20
    assert got["identical"], got
    assert got["max_loss_diff"] == 0.0 and got["max_weight_diff"] == 0.0


class _Final(pl.Callback):
    """The student's weights at the end of fit: the weight average, put in place."""

    def on_fit_end(self, trainer, pl_module) -> None:
        self.weights = {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()}


def test_the_bare_loop_keeps_the_recipes_weight_average(world):
    final = _Final()
    train_student(*world, callbacks=[final])
    loop = bare_loop(*world, ema=True)
    assert loop.ema_decay == world[0].ema_decay
    loop.run(list(loop.datamodule.train_dataloader()))
    averaged = {k: v.detach() for k, v in loop.module.model.state_dict().items()}
    assert averaged.keys() == final.weights.keys()
    assert all(torch.equal(averaged[k], final.weights[k]) for k in averaged)
    raw = _bare(*world)[1]  # without it, the last step's weights: other values
    assert not all(torch.equal(raw[k], final.weights[k]) for k in raw)


def test_lightning_wrappers_give_the_same_step(world):
    plain, wrapped = _Probe(), _WatchesGradients()
    train_student(*world, callbacks=[plain])
    train_student(*world, callbacks=[wrapped])
    assert plain.plain and not wrapped.plain and wrapped.seen
    assert compare(plain.losses, plain.weights, wrapped.losses, wrapped.weights)["identical"]


def test_bare_loop_is_labels_only(world):
    spec, job, *rest = world
    with pytest.raises(ValueError, match="labels only"):
        bare_loop(spec, dataclasses.replace(job, variant=spec.variant("kd")), *rest)


@pytest.mark.parametrize("precision", ["bf16-mixed", "64-true"])
def test_wrappers_are_kept_where_they_act(world, precision):
    module, _ = build_module(*world)
    module.trainer = pl.Trainer(accelerator="cpu", precision=precision, logger=False)
    assert not wrappers_inert(module)
    module.trainer = pl.Trainer(accelerator="cpu", logger=False)
    assert wrappers_inert(module)
    module.trainer = pl.Trainer(accelerator="cpu", logger=False, callbacks=[_WatchesGradients()])
    assert not wrappers_inert(module)
