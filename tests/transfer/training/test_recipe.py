"""The teacher recipe in the library: output biases at the base rate's logit for
every fresh fit, and the best validation epoch kept and used."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from gemkd.experiments.teacher_config import TeacherTrainConfig, load_teacher_config
from gemkd.experiments.teacher_fit import fit_teacher
from gemkd.students import build_student
from gemkd.teachers import GEM, MLPRanker
from gemkd.transfer.distill import DistillModule
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.training import RankingModule
from tests.teachers.helpers import TINY, tiny_schema

ROOT = Path(__file__).resolve().parents[3]
RATES = {"click": 0.05, "conversion": 0.002, "engage": 0.3}


def logit(p: float) -> float:
    return math.log(p / (1 - p))


@pytest.mark.parametrize("head_type", ["domain_task", "domain_gated"])
def test_teacher_heads_start_at_the_base_rate(head_type):
    schema = tiny_schema()
    model = GEM.from_config(schema, {**TINY, "head_type": head_type})
    RankingModule(model, schema.tasks, schema.domains, base_rates=RATES)
    bias = (model.heads.b2.view(3, 3) if head_type == "domain_task"
            else model.heads.logit_bias.weight)
    want = torch.tensor([logit(RATES[t]) for t in schema.tasks])
    assert torch.allclose(bias, want.expand(3, -1))


def test_mlp_ranker_and_students_start_at_the_base_rate():
    schema = tiny_schema()
    ranker = MLPRanker.from_config(schema, {"d": 8, "hidden": 16})
    RankingModule(ranker, schema.tasks, schema.domains, base_rates=RATES)
    assert torch.allclose(ranker.out.bias, torch.tensor([logit(RATES[t]) for t in schema.tasks]))
    student = build_student("mlp", schema, ["conversion"])
    DistillModule(student, ["conversion"], schema.domains, base_rates={"conversion": 0.002})
    assert student.head.bias.item() == pytest.approx(logit(0.002), rel=1e-6)


def test_no_base_rates_or_opt_out_leaves_the_model_alone():
    schema = tiny_schema()
    model = GEM.from_config(schema, TINY)
    before = model.heads.b2.clone()
    RankingModule(model, schema.tasks, schema.domains)  # no base rates: an export's module
    RankingModule(model, schema.tasks, schema.domains, base_rates=RATES, init_output_bias=False)
    assert torch.equal(model.heads.b2, before)


def test_best_validation_epoch_is_kept_and_used(tiny_data, tmp_path):
    torch.set_num_threads(1)
    cfg = load_teacher_config(ROOT / "experiments/teachers/tiny.yaml",
                              {"max_seq_len": 8, "max_epochs": 3, "select": "best",
                               "batch_size": 256, "train_days": [0, 2], "val_days": [2, 3],
                               "lr": 0.03, "embedding_lr": 0.3})
    summary = fit_teacher(cfg, tiny_data, tmp_path / "run", progress=False)
    best = tmp_path / "run" / "checkpoints" / "best.ckpt"
    assert best.is_file() and summary["checkpoint"] == str(best)
    # the kept epoch alone, weights only (the finished fit's resume state is dropped)
    assert [p.name for p in best.parent.iterdir()] == ["best.ckpt"]
    assert "optimizer_states" not in torch.load(best, map_location="cpu", weights_only=False)
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    per_epoch = metrics["val/loss"].dropna().tolist()[:3]
    assert len(per_epoch) == 3
    saved = json.loads((tmp_path / "run" / "val_metrics.json").read_text())
    # the final validation is the kept epoch's: the lowest of the three
    h = {t: -(p * math.log(p) + (1 - p) * math.log(1 - p))
         for t, p in _train_rates(tiny_data, cfg).items()}
    loss = sum(saved["val"][f"ne/{t}/all"] * h[t] for t in h)
    assert loss == pytest.approx(min(per_epoch), rel=1e-4)


def _train_rates(data, cfg: TeacherTrainConfig) -> dict[str, float]:
    from gemkd.transfer.data.schema import DatasetSchema
    from gemkd.transfer.training import training_base_rates

    return training_base_rates(data, cfg.train_days, DatasetSchema.load(data).tasks)


def test_select_best_needs_validation_days():
    with pytest.raises(ValueError, match="need 'val_days'"):
        TeacherTrainConfig(select="best")
    with pytest.raises(ValueError, match="need 'val_days'"):
        TeacherTrainConfig(patience=2)


def test_init_from_starts_from_the_checkpoint_weights(tiny_data, tmp_path):
    """A warm start (recurring training, hierarchical FMs from GEM): the built model holds the
    checkpoint's weights, biases included (no base-rate reset); another architecture is an
    error that names the tensors that do not fit."""
    from gemkd.experiments.teacher_config import build_model, build_run
    from gemkd.transfer.data.schema import DatasetSchema

    torch.set_num_threads(1)
    over = {"max_seq_len": 8, "max_steps": 2, "batch_size": 256, "train_days": [0, 2]}
    cfg = load_teacher_config(ROOT / "experiments/teachers/tiny.yaml", over)
    ckpt = fit_teacher(cfg, tiny_data, tmp_path / "run", progress=False)["checkpoint"]
    trained = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    warm = load_teacher_config(ROOT / "experiments/teachers/tiny.yaml",
                               {**over, "init_from": ckpt})
    _, module = build_run(warm, tiny_data)
    for k, v in module.model.state_dict().items():
        assert torch.equal(v, trained[f"model.{k}"]), k
    other = load_teacher_config(ROOT / "experiments/teachers/tiny.yaml",
                                {**over, "init_from": ckpt, "model": {"d": 4}})
    with pytest.raises(ConfigError, match=r"init_from .*do not fit this model"):
        build_model(other, DatasetSchema.load(tiny_data))
    missing = load_teacher_config(ROOT / "experiments/teachers/tiny.yaml",
                                  {**over, "init_from": str(tmp_path / "nope.ckpt")})
    with pytest.raises(ConfigError, match="init_from .*nope.ckpt: no such checkpoint"):
        build_model(missing, DatasetSchema.load(tiny_data))
