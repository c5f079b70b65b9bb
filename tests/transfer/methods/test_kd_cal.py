"""KD's ``bce_cal`` loss (losses.kd_bce_calibrated): at T > 1 a student's mean probability stays
at its target's (plain tempered KD's drifts below it), T = 1 is plain KD bit for bit, and a spec
selects it by ``kd_loss`` or the built-in ``kd_cal`` / ``kd_adapter_cal`` variants."""

from __future__ import annotations

import pytest
import torch

from gemkd.experiments.run.methods import build_methods, check_variant
from gemkd.experiments.spec import load_spec
from gemkd.transfer.methods import KD, StepState, TeacherTargets
from gemkd.transfer.methods.losses import KD_LOSSES, kd_bce, kd_bce_calibrated
from gemkd.transfer.models import StudentOutput
from tests.teachers.helpers import random_batch, tiny_schema


def _teacher_and_feature(n: int = 4000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher logits around −3 (p ≈ 0.1) and a noisy view of them: a student reading the view
    cannot match the teacher row by row, as a small student cannot."""
    g = torch.Generator().manual_seed(seed)
    z_t = -3.0 + 1.5 * torch.randn(n, 1, generator=g)
    return z_t, z_t + torch.randn(n, 1, generator=g)


def _stationary_mean_p(loss: str, temperature: float, z_t: torch.Tensor, x: torch.Tensor,
                       found: torch.Tensor | None = None) -> float:
    """The mean probability, over the found rows, of the student ``0.65·x + b`` at the bias b
    where the loss's mean gradient in b is 0 (bisection: the loss is convex in b)."""
    def grad_b(b: float) -> float:
        bias = torch.tensor(b, requires_grad=True)
        z_s = 0.65 * x + bias
        per_row = KD_LOSSES[loss](z_s, z_t, temperature=temperature, found=found)
        value = per_row.mean() if found is None else per_row[found].mean()
        (g,) = torch.autograd.grad(value, bias)
        return float(g)

    lo, hi = -10.0, 10.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if grad_b(mid) < 0 else (lo, mid)
    z_s = 0.65 * x + (lo + hi) / 2
    keep = slice(None) if found is None else found
    return float(torch.sigmoid(z_s[keep]).mean())


@pytest.mark.parametrize("temperature", [2.0, 4.0])
def test_at_t_above_one_the_student_keeps_the_teachers_mean_probability(temperature):
    z_t, x = _teacher_and_feature()
    teacher = float(torch.sigmoid(z_t).mean())
    calibrated = _stationary_mean_p("bce_cal", temperature, z_t, x)
    plain = _stationary_mean_p("bce", temperature, z_t, x)
    assert calibrated == pytest.approx(teacher, rel=1e-4)
    assert plain < 0.95 * teacher  # tempered KD under-predicts (0.89x at T = 2, 0.83x at 4)
    # at T = 1 both forms are calibrated: the bias drift is the temperature's
    assert _stationary_mean_p("bce", 1.0, z_t, x) == pytest.approx(teacher, rel=1e-4)


def test_rows_without_a_teacher_do_not_move_the_mean():
    z_t, x = _teacher_and_feature()
    found = torch.arange(len(z_t)) % 3 != 0
    z_t = torch.where(found.unsqueeze(-1), z_t, torch.full_like(z_t, 8.0))  # rows not found
    teacher = float(torch.sigmoid(z_t[found]).mean())
    assert _stationary_mean_p("bce_cal", 4.0, z_t, x, found) == pytest.approx(teacher, rel=1e-4)


def test_at_t_one_it_is_plain_kd_bit_for_bit():
    g = torch.Generator().manual_seed(1)
    z_s = torch.randn(64, 2, generator=g, requires_grad=True)
    z_t = torch.randn(64, 2, generator=g) * 3 - 2
    found = torch.arange(64) % 5 != 0
    cal = kd_bce_calibrated(z_s, z_t, 1.0, found)
    plain = kd_bce(z_s, z_t, 1.0)
    (g_cal,) = torch.autograd.grad(cal.sum(), z_s)
    (g_plain,) = torch.autograd.grad(plain.sum(), z_s)
    assert torch.equal(cal, plain) and torch.equal(g_cal, g_plain)
    # a pack's tensor knob at 1: the same to rounding
    t1 = kd_bce_calibrated(z_s, z_t, torch.tensor(1.0, dtype=torch.float64), found)
    (g_t1,) = torch.autograd.grad(t1.sum(), z_s)
    assert torch.allclose(t1, plain, atol=1e-6) and torch.allclose(g_t1, g_plain, atol=1e-6)


def test_the_calibration_term_changes_the_gradients_mean_not_the_value():
    """The term's value is 0 (the logged loss is kd_bce's); the gradient's per-task mean is
    the untempered residual's, its deviations from the mean the tempered ones."""
    g = torch.Generator().manual_seed(2)
    z_s = torch.randn(32, 2, generator=g, requires_grad=True)
    z_t = torch.randn(32, 2, generator=g) * 2 - 3
    t = torch.tensor(3.0, dtype=torch.float64)  # a pack's knob takes the same path
    cal = kd_bce_calibrated(z_s, z_t, t)
    plain = kd_bce(z_s, z_t, t)
    assert torch.equal(cal, plain)
    (g_cal,) = torch.autograd.grad(cal.sum(), z_s)
    (g_plain,) = torch.autograd.grad(plain.sum(), z_s)
    untempered = (torch.sigmoid(z_s) - torch.sigmoid(z_t)).detach()
    assert torch.allclose(g_cal.mean(0), untempered.mean(0), atol=1e-6)
    assert torch.allclose(g_cal - g_cal.mean(0), g_plain - g_plain.mean(0), atol=1e-6)
    assert not torch.allclose(g_plain.mean(0), untempered.mean(0), atol=1e-3)


def test_a_packs_batched_temperature_gives_each_members_loss():
    """Under vmap (a pack's members, each its own T as a float64 0-dim knob) each member's
    loss and gradient are its own float-T call's."""
    g = torch.Generator().manual_seed(3)
    z_s = torch.randn(3, 40, 2, generator=g)
    z_t = torch.randn(40, 2, generator=g) * 2 - 3
    found = torch.arange(40) % 4 != 0
    temps = [1.0, 2.0, 5.0]

    def member(s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return kd_bce_calibrated(s, z_t, t, found)[found].mean()

    packed = torch.func.vmap(torch.func.grad_and_value(member))(
        z_s, torch.tensor(temps, dtype=torch.float64))
    for k, t in enumerate(temps):
        alone = torch.func.grad_and_value(lambda s, t=t: member(s, t))(z_s[k])
        assert torch.allclose(packed[0][k], alone[0], atol=1e-7)
        assert torch.allclose(packed[1][k], alone[1], atol=1e-6)


def test_kd_distils_from_the_realigned_target_with_bce_cal():
    """Through the method: the student's mean residual is taken against ``kd_target()``, the
    Student Adapter's logits when it set them."""
    schema = tiny_schema()
    batch = random_batch(schema, b=16, long_len=10)
    n = len(batch)

    def teacher(_):
        return TeacherTargets(torch.full((n, 1), -3.0), torch.ones(n, dtype=torch.bool), None)

    step = StepState(batch, teacher, torch.device("cpu"))
    step.kd_logits = torch.full((n, 1), -1.0)  # what an adapter realigned them to
    z_s = torch.zeros(n, 1, requires_grad=True)
    kd = KD(alpha=1.0, temperature=4.0, loss="bce_cal")
    (grad,) = torch.autograd.grad(kd.loss(step, StudentOutput(logits=z_s))["kd"], z_s)
    expect = (torch.sigmoid(torch.tensor(0.0)) - torch.sigmoid(torch.tensor(-1.0))) / n
    assert torch.allclose(grad, torch.full_like(grad, float(expect)), atol=1e-7)


def test_a_spec_selects_it_by_kd_loss_or_the_built_in_variants():
    spec = load_spec(None, ["kd_loss=bce_cal", "variants=[kd, kd_cal, kd_adapter_cal, kd_aux]"])
    built = {v.name: build_methods(spec, v, {}) for v in spec.variants}
    assert {name: ms[0].kd_loss for name, ms in built.items()} == {
        "kd": "bce_cal", "kd_cal": "bce_cal", "kd_adapter_cal": "bce_cal", "kd_aux": "bce_cal"}
    assert [type(m).__name__ for m in built["kd_adapter_cal"]] == ["KD", "Adapter"]
    default = load_spec(None, ["variants=[kd, kd_cal]"])  # kd_cal's own init_args win
    assert [build_methods(default, v, {})[0].kd_loss for v in default.variants] == \
        ["bce", "bce_cal"]
    for v in default.variants:
        check_variant(default, v)
    with pytest.raises(ValueError, match="expected one of .*'bce_cal'"):
        KD(loss="calibrated")


@pytest.mark.slow
def test_the_kd_cal_variants_run_end_to_end(tmp_path):
    """``gemkd run`` trains kd_cal and kd_adapter_cal at T = 2 (the term active), two seeds per
    pack (the vmapped path)."""
    import pandas as pd
    import yaml

    from gemkd.experiments.cli import main
    from tests.faults.conftest import SPEC

    spec = {**SPEC, "seeds": [0, 1], "variants": ["kd", "kd_cal", "kd_adapter_cal"],
            "tuning": {"knobs": {"alpha": [0.7], "temperature": [2.0], "adapter_hidden": [4],
                                 "lr": [0.01]}}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "out"),
                 "--threads", "1", "--pack-size", "2"]) == 0
    df = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(df["variant"]) == {"kd", "kd_cal", "kd_adapter_cal"}
    assert df["ne"].notna().all() and df["calibration"].notna().all()
    ne = df[(df.domain == "all") & (df.task == "click")].groupby("variant")["ne"].mean()
    assert ne["kd_cal"] != ne["kd"]  # the term is active at T = 2
