"""KD's convex form ``(1 − α)·BCE(y) + α·T²·BCE(teacher)`` (DESIGN §6 "Fair comparison"),
through the real training step of DistillModule on a tiny batch."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from gemkd.adapters.methods import AuxHead
from gemkd.students import build_student
from gemkd.transfer.distill import DistillModule
from gemkd.transfer.methods import KD, StepState, TeacherTargets
from gemkd.transfer.methods.losses import kd_bce
from gemkd.transfer.testing import random_batch, tiny_schema
from gemkd.transfer.training import make_trainer

TASKS = list(tiny_schema().tasks)  # every task: random_batch labels them all


def teacher(batch) -> TeacherTargets:
    n = len(batch)
    logits = torch.linspace(-3.0, 2.0, n * len(TASKS)).reshape(n, len(TASKS))
    found = torch.arange(n) % 4 != 0  # a quarter of the rows without a teacher row
    return TeacherTargets(logits, found)


def step_loss(methods, batch) -> torch.Tensor:
    """The loss DistillModule.training_step builds, without an optimiser step."""
    torch.manual_seed(0)
    schema = tiny_schema()
    student = build_student({"class_path": "mlp", "init_args": {"hidden": [8]}}, schema, TASKS)
    student.eval()
    module = DistillModule(student, TASKS, schema.domains, methods=methods, teacher=teacher)
    module.optimizers = lambda: None
    module._manual_step = lambda *args: None
    module._log_step = lambda *args, **kw: None
    return module.training_step(batch, 0).detach()


@pytest.fixture(scope="module")
def batch():
    return random_batch(tiny_schema(), b=16, seed=3)


@pytest.fixture(scope="module")
def parts(batch):
    """(label BCE, masked KD term at T = 2) of the same student on the same batch."""
    torch.manual_seed(0)
    schema = tiny_schema()
    student = build_student({"class_path": "mlp", "init_args": {"hidden": [8]}}, schema, TASKS)
    student.eval()
    module = DistillModule(student, TASKS, schema.domains)
    with torch.no_grad():
        logits = module.student_output(batch).logits
        label = module.loss(logits, batch.labels, module.label_mask(batch))[0]
        t = teacher(batch)
        kd = kd_bce(logits, t.logits, temperature=2.0)[t.found].mean()  # masked_mean
    return label, kd


def test_alpha_zero_is_labels_only_and_one_is_pure_distillation(batch, parts):
    label, kd = parts
    assert torch.allclose(step_loss([], batch), label)
    assert torch.allclose(step_loss([KD(alpha=0.0, temperature=2.0)], batch), label)
    assert torch.allclose(step_loss([KD(alpha=1.0, temperature=2.0)], batch), kd)


@pytest.mark.parametrize("alpha", [0.25, 0.7])
def test_the_loss_at_alpha_is_the_convex_mix(batch, parts, alpha):
    label, kd = parts
    got = step_loss([KD(alpha=alpha, temperature=2.0)], batch)
    assert torch.allclose(got, (1 - alpha) * label + alpha * kd, atol=1e-6)
    # the same family as λ = α / (1 − α), up to the loss scale 1 − α
    lam = step_loss([KD(kd_weight=alpha / (1 - alpha), temperature=2.0)], batch)
    assert torch.allclose(got, (1 - alpha) * lam, atol=1e-6)


def test_alpha_scales_the_label_loss_through_the_step_and_composes():
    batch = random_batch(tiny_schema(), b=4)
    for order in ([KD(alpha=0.25), AuxHead(label_weight=0.5)],
                  [AuxHead(label_weight=0.5), KD(alpha=0.25)]):
        step = StepState(batch, None, torch.device("cpu"))
        for m in order:
            m.before_student(step)
        assert step.label_weight == pytest.approx(0.375)
    step = StepState(batch, None, torch.device("cpu"))  # no teacher: α = 0 never asks for one
    KD(alpha=0.0).before_student(step)
    assert KD(alpha=0.0).loss(step, None) == {} and step.label_weight == 1.0
    KD().before_student(step)  # the additive form leaves the label loss alone
    assert step.label_weight == 1.0 and KD().kd_weight == 1.0 and KD().alpha is None


@pytest.mark.parametrize("kwargs, message", [
    ({"alpha": 0.5, "kd_weight": 1.0}, "alpha .* or kd_weight .*, not both"),
    ({"alpha": 1.5}, r"alpha must be in \[0, 1\]"),
    ({"alpha": -0.1}, r"alpha must be in \[0, 1\]"),
])
def test_bad_kd_forms(kwargs, message):
    with pytest.raises(ValueError, match=message):
        KD(**kwargs)


class _Batches:
    """A loader of ready batches (a plain list would be read as a list of loaders)."""

    def __init__(self, batches) -> None:
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class _GradNorm(pl.Callback):
    """The student's gradient norm as the optimiser is about to step (after any clipping)."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for p in pl_module.model.parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g) for g in grads]))))


@pytest.mark.parametrize("grad_clip", [None, 1e-3])
def test_grad_clip_bounds_the_students_gradient_norm(batch, grad_clip):
    """Manual optimisation: the module clips (the Trainer's gradient_clip_val must stay unset)."""
    torch.manual_seed(0)
    schema = tiny_schema()
    student = build_student({"class_path": "mlp", "init_args": {"hidden": [8]}}, schema, TASKS)
    module = DistillModule(student, TASKS, schema.domains, methods=[KD(kd_weight=1.0)],
                           teacher=teacher, grad_clip=grad_clip)
    norms = _GradNorm()
    make_trainer(accelerator="cpu", callbacks=[norms], limit_val_batches=0).fit(
        module, train_dataloaders=_Batches([batch] * 3))
    assert len(norms.norms) == 3
    if grad_clip is None:
        assert min(norms.norms) > 1e-2  # so that the clip below acts
    else:
        assert max(norms.norms) <= grad_clip * (1 + 1e-4)


class _WatchesBackward(pl.Callback):
    """Overrides a backward hook: the step then goes through Lightning's wrappers."""

    def on_after_backward(self, trainer, pl_module) -> None:
        self.seen = True


def test_grad_clip_is_the_same_on_the_plain_and_the_wrapped_step(batch):
    def train(grad_clip, callbacks):
        torch.manual_seed(0)
        schema = tiny_schema()
        student = build_student({"class_path": "mlp", "init_args": {"hidden": [8]}}, schema,
                                TASKS)
        module = DistillModule(student, TASKS, schema.domains, methods=[KD(kd_weight=1.0)],
                               teacher=teacher, grad_clip=grad_clip)
        make_trainer(accelerator="cpu", callbacks=callbacks, limit_val_batches=0).fit(
            module, train_dataloaders=_Batches([batch] * 3))
        return module._manual_step._plain, {k: v.clone() for k, v in student.state_dict().items()}

    plain, clipped = train(1e-3, [])
    wrapped, clipped_wrapped = train(1e-3, [_WatchesBackward()])
    _, free = train(None, [])
    assert plain and not wrapped
    assert all(torch.equal(clipped[k], clipped_wrapped[k]) for k in clipped)
    assert not all(torch.equal(clipped[k], free[k]) for k in clipped)
