"""A teacher checkpoint without training: the tiny GEM at its initial weights, saved the way a
fit saves one (``config.yaml`` beside ``checkpoints/``), so the pair step runs in seconds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from gemkd.experiments.teacher.teacher_config import build_model, load_teacher_config
from gemkd.transfer.data.schema import DatasetSchema

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_data, tmp_path_factory) -> Path:
    torch.manual_seed(0)
    cfg = load_teacher_config(ROOT / "experiments/teacher/configs/tiny.yaml",
                              {"max_seq_len": 32, "train_days": [0, 3]})
    model = build_model(cfg, DatasetSchema.load(tiny_data))
    run = tmp_path_factory.mktemp("teacher") / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    ckpt = run / "checkpoints" / "last.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, ckpt)
    return ckpt
