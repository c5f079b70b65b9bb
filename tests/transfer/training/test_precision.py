"""``precision: auto`` (the teacher configs' default): bf16-mixed where a fit runs on CUDA,
32-true on the CPU; an explicit precision is kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gemkd.experiments.teacher.teacher_config import load_teacher_config
from gemkd.transfer.training.trainer import make_trainer, resolve_precision

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("accelerator", "cuda", "want"), [
    ("cpu", True, "32-true"), ("cuda", False, "bf16-mixed"), ("gpu", False, "bf16-mixed"),
    ("auto", True, "bf16-mixed"), ("auto", False, "32-true")])
def test_auto_is_bf16_mixed_on_cuda_only(monkeypatch, accelerator, cuda, want):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert resolve_precision("auto", accelerator) == want
    assert resolve_precision("16-mixed", accelerator) == "16-mixed"


def test_a_cpu_trainer_of_the_default_config_runs_in_float32():
    cfg = load_teacher_config(ROOT / "experiments/teacher/configs/small.yaml")
    assert cfg.precision == "auto"
    trainer = make_trainer(accelerator="cpu", precision=cfg.precision)
    assert trainer.precision == "32-true"
