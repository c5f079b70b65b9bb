"""The MLP baseline's contract (fast) and the teacher ablation on a synthetic world (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from gemkd.teachers import MLPRanker
from gemkd.teachers.gem.embeddings import HashedEmbedding
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.models import TeacherOutput
from tests.teachers.helpers import random_batch, tiny_schema

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "experiments" / "teacher" / "configs"


def test_mlp_ranker_contract_and_gradients():
    schema = tiny_schema()
    cfg = yaml.safe_load((CONFIGS / "mlp_small.yaml").read_text())
    assert cfg["class_path"] == "gemkd.teachers.MLPRanker"
    torch.manual_seed(0)
    model = MLPRanker.from_config(schema, {**cfg["model"], "d": 8, "hidden": 32}).train()
    batch = random_batch(schema, b=64, seed=0)
    assert batch.seq_max_len > 1000 and (batch.seq_lengths == 0).any()
    out = model(batch)
    assert isinstance(out, TeacherOutput)
    assert out.logits.shape == (64, 3) and out.logits.dtype == torch.float32
    assert torch.isfinite(out.logits).all()
    assert model.representation_names() == ["trunk"] == list(out.repr)
    assert out.repr["trunk"].shape == (64, model.representation_dims()["trunk"]) == (64, 32)
    torch.nn.functional.binary_cross_entropy_with_logits(out.logits, batch.labels).backward()
    dead = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not dead, dead
    # history items share the candidate ad's table; every table is one FSDP unit
    units = model.fsdp_units()
    assert units and all(isinstance(m, HashedEmbedding) for m in units)
    assert len({id(m) for m in units}) == len(units)
    assert model.embeddings.table_for("hist_item_id") is model.embeddings.tables["ad_id"]
    # the full-size config builds too
    assert MLPRanker.from_config(schema, cfg["model"]).eval()(batch).logits.shape == (64, 3)
    with pytest.raises(ConfigError, match="unknown model key"):
        MLPRanker.from_config(schema, {"hidden": 32, "n_layers": 3})
    with pytest.raises(ConfigError, match="hidden"):
        MLPRanker(schema, hidden=0)
