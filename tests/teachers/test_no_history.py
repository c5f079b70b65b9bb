"""Teachers on a log without histories (a schema with no sequence fields, ``max_history`` 0, as
``gemkd data import`` writes without a ``history`` mapping): they build without their sequence
arm, whatever the shipped configs say, and train; only an impossible config is an error."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from gemkd.teachers import GEM, DomainFM, MLPRanker
from gemkd.teachers.teacher_registry import build_teacher
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.models import TeacherOutput
from tests.teachers.helpers import TINY, tiny_schema
from tests.teachers.history_less import history_less_batch, history_less_schema

CONFIGS = Path(__file__).resolve().parents[2] / "experiments" / "teacher" / "configs"
SMALL = {  # fast sizes per teacher class
    GEM: TINY,
    DomainFM: {"d": 8, "mlp_width": 16, "trunk_dim": 8, "head_hidden": 8},
    MLPRanker: {"d": 8, "hidden": 16},
}
SHIPPED = ["tiny", "small", "base", "domain_fm", "mlp_small"]
B = 32


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def schema():
    return history_less_schema()


@pytest.fixture(scope="module")
def batch(schema):
    return history_less_batch(schema, b=B, seed=0)


def build(cls, schema, seed=0, **overrides):
    torch.manual_seed(seed)
    return cls(schema, **{**SMALL[cls], **overrides})


def assert_output(model, out: TeacherOutput) -> None:
    """Finite float32 logits ``[B, n_tasks]`` and every declared representation, at its width."""
    assert isinstance(out, TeacherOutput)
    assert out.logits.shape == (B, 3) and out.logits.dtype == torch.float32
    assert torch.isfinite(out.logits).all()
    assert list(out.repr) == model.representation_names()
    for name, r in out.repr.items():
        assert r.shape == (B, model.representation_dims()[name]), name
        assert torch.isfinite(r).all(), name


def fit_steps(model, batch, steps: int = 15) -> tuple[float, float]:
    """BCE before and after ``steps`` Adam steps on one fixed batch."""
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps + 1):
        loss = F.binary_cross_entropy_with_logits(model(batch).logits, batch.labels)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses[0], losses[-1]


def test_helpers_make_a_history_less_schema_and_batch(schema, batch):
    assert schema.sequence == [] and schema.max_history == 0
    assert batch.seq_values == {} and batch.seq_max_len == 0
    assert batch.seq_offsets.shape == (B + 1,) and not batch.seq_offsets.any()
    assert tiny_schema().sequence  # the shared helper keeps its histories
    with pytest.raises(ValueError, match="has sequence fields"):
        history_less_batch(tiny_schema())


@pytest.mark.parametrize("cls", [GEM, DomainFM, MLPRanker])
@pytest.mark.parametrize("use_sequence", [None, True])
def test_builds_without_sequence_arm_and_learns(cls, use_sequence, schema, batch):
    """The default (auto) and the shipped configs' explicit ``true`` both adapt."""
    model = build(cls, schema, use_sequence=use_sequence)
    config = model.config if isinstance(model.config, dict) else model.config.to_dict()
    assert model.use_sequence is False and config["use_sequence"] is False
    assert config["max_history"] == 0  # the schema's, accepted: nothing reads it
    assert not model.embeddings.seq_names and not len(model.embeddings.seq_tables)
    assert "sequence" not in model.representation_names()
    assert not any(n.startswith("cross.") for n in model.representation_names())
    assert_output(model, model.eval()(batch))
    first, last = fit_steps(model, batch)
    assert last < 0.9 * first, (first, last)


@pytest.mark.parametrize("cls", [GEM, DomainFM, MLPRanker])
def test_max_history_zero_is_accepted_without_the_arm(cls, schema):
    build(cls, schema, max_history=0)
    build(cls, tiny_schema(), max_history=0, use_sequence=False)  # the arm turned off
    with pytest.raises(ConfigError, match="max_history must be an integer >= 1, got 0"):
        build(cls, tiny_schema(), max_history=0)  # the arm is built: still checked


@pytest.mark.parametrize("cls", [GEM, DomainFM, MLPRanker])
def test_default_keeps_the_arm_where_the_data_has_histories(cls):
    model = build(cls, tiny_schema())
    assert model.use_sequence is True and model.embeddings.seq_names


def test_explicit_true_warns_and_auto_only_informs(schema, caplog):
    with caplog.at_level(logging.INFO, logger="gemkd.teachers.configurable"):
        build(GEM, schema)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "no sequence fields" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gemkd.teachers.configurable"):
        build(MLPRanker, schema, use_sequence=True)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "use_sequence: false" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gemkd.teachers.configurable"):
        build(GEM, tiny_schema())  # histories present: nothing to say
        build(GEM, schema, use_sequence=False)  # asked for what it gets
    assert not caplog.records


def test_errors_only_where_adapting_is_impossible(schema):
    with pytest.raises(ConfigError, match="no sequence fields.*set use_wukong: true"):
        build(GEM, schema, use_wukong=False)  # sequence-only GEM: nothing left
    with pytest.raises(ConfigError, match="both false"):  # unchanged with histories
        build(GEM, tiny_schema(), use_wukong=False, use_sequence=False)
    with pytest.raises(ConfigError, match="MLPRanker: key 'use_sequence': expected true or "
                                          "false, got 'yes'"):
        build(MLPRanker, schema, use_sequence="yes")


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_build_on_a_history_less_schema(name, schema):
    """The configs in experiments/teacher/configs say ``use_sequence: true`` and a
    ``max_history``."""
    cfg = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    torch.manual_seed(0)
    model = build_teacher(cfg["class_path"], schema, cfg["model"]).eval()
    assert model.use_sequence is False
    small = history_less_batch(schema, b=8, seed=1)
    with torch.no_grad():
        out = model(small)
    assert out.logits.shape == (8, 3) and torch.isfinite(out.logits).all()
    assert "trunk" in out.repr
