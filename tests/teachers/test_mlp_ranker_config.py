"""MLPRankerConfig: the MLP ranker's hyper-parameters as a typed, frozen dataclass whose rules are
declared beside its fields; the ranker built from it or from its keys is the same model, and the
shipped config still builds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from gemkd.teachers import MLPRanker, MLPRankerConfig
from gemkd.teachers.teacher_registry import build_teacher
from gemkd.transfer.constraints import field_rules
from gemkd.transfer.errors import ConfigError
from tests.teachers.helpers import random_batch, tiny_schema

CONFIG = (Path(__file__).resolve().parents[2] / "experiments" / "teacher" / "configs"
          / "mlp_small.yaml")
SMALL = {"d": 8, "hidden": 16}


@pytest.fixture(scope="module")
def schema():
    return tiny_schema()


def test_the_fields_are_the_model_keys():
    names = [f.name for f in dataclasses.fields(MLPRankerConfig)]
    assert MLPRanker.hparam_names() == names
    assert names == ["d", "hidden", "max_history", "max_rows", "n_dense_tokens", "domain_token",
                     "use_sequence", "shared_tables", "dropout"]
    # the rules are declared in the annotations, where check_fields reads them
    assert [name for name, _ in field_rules(MLPRankerConfig)] == [
        "d", "hidden", "max_history", "max_rows", "n_dense_tokens", "use_sequence", "dropout"]


def test_frozen_and_checked_on_construction():
    cfg = MLPRankerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d = 16  # type: ignore[misc]
    with pytest.raises(ValueError, match="hidden must be an integer >= 1, got 0"):
        MLPRankerConfig(hidden=0)
    with pytest.raises(ValueError, match=r"d must be an integer >= 1, got -2; dropout must be "
                                         r"in \[0, 1\), got 1.5"):
        MLPRankerConfig(d=-2, dropout=1.5)


@pytest.mark.parametrize(("values", "message"), [
    ({"hidden": 32, "n_layers": 3}, r"^MLPRanker: unknown key 'n_layers'; valid keys: d, "
                                    r"domain_token, dropout, hidden, max_history, max_rows, "),
    ({"hidden": "256"}, r"^MLPRanker: key 'hidden': expected an integer, got '256'$"),
    ({"d": True}, r"^MLPRanker: key 'd': expected an integer, got True$"),
    ({"hidden": 0}, r"^MLPRanker: hidden must be an integer >= 1, got 0$"),
    ({"max_rows": 0}, r"^MLPRanker: max_rows must be an integer >= 1, got 0$"),
    ({"n_dense_tokens": -1}, r"^MLPRanker: n_dense_tokens must be an integer >= 0, got -1$"),
    ({"dropout": 1.0}, r"^MLPRanker: dropout must be in \[0, 1\), got 1.0$"),
    ({"dropout": "0.1"}, r"^MLPRanker: key 'dropout': expected a number, got '0.1'$"),
    ({"use_sequence": "yes"}, r"^MLPRanker: key 'use_sequence': expected true or false, "
                              r"got 'yes'$"),
    ({"shared_tables": ["ad_id"]}, r"^MLPRanker: key 'shared_tables': expected a mapping"),
])
def test_a_bad_key_or_value_is_a_config_error_naming_it(values, message):
    with pytest.raises(ConfigError, match=message):
        MLPRankerConfig.from_mapping(values)


def test_the_source_is_named(schema):
    with pytest.raises(ConfigError, match=r"^teachers/mlp\.yaml: key 'hidden': expected an "):
        MLPRankerConfig.from_mapping({"hidden": 2.5}, "teachers/mlp.yaml")
    # through the registry a teacher config's model: keys reach the same checks
    with pytest.raises(ConfigError, match="unknown model key"):
        build_teacher("mlp", schema, {"hidden": 32, "n_layers": 3})
    with pytest.raises(ConfigError, match=r"^MLPRanker: hidden must be an integer >= 1, got 0$"):
        build_teacher("mlp", schema, {"hidden": 0})


def test_ints_become_floats_where_a_float_is_expected():
    cfg = MLPRankerConfig.from_mapping({"dropout": 0})
    assert cfg.dropout == 0.0 and isinstance(cfg.dropout, float)


def test_resolve_fills_what_the_dataset_decides(schema):
    cfg = MLPRankerConfig(**SMALL).resolve(schema, "MLPRanker")
    assert cfg.use_sequence is True and cfg.max_history == schema.max_history
    with pytest.raises(ConfigError, match=r"^MLPRanker: max_history must be an integer >= 1, "
                                          r"got 0$"):
        MLPRankerConfig(max_history=0).resolve(schema, "MLPRanker")
    # the history is not pooled: max_history is not read, so 0 is accepted
    off = MLPRankerConfig(max_history=0, use_sequence=False).resolve(schema, "MLPRanker")
    assert off.use_sequence is False


def test_a_config_and_its_keys_build_the_same_model(schema):
    torch.manual_seed(0)
    by_keys = MLPRanker(schema, **SMALL)
    torch.manual_seed(0)
    by_config = MLPRanker(schema, MLPRankerConfig(**SMALL))
    assert by_keys.config == by_config.config
    a, b = by_keys.state_dict(), by_config.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert MLPRanker(schema, MLPRankerConfig(**SMALL), hidden=8).config.hidden == 8
    with pytest.raises(ConfigError, match="MLPRanker: key 'hidden': expected an integer"):
        MLPRanker(schema, MLPRankerConfig(**SMALL), hidden="eight")
    with pytest.raises(ConfigError, match="config must be an MLPRankerConfig"):
        MLPRanker(schema, dict(SMALL))  # type: ignore[arg-type]


def test_the_shipped_config_builds_through_the_registry(schema):
    cfg = yaml.safe_load(CONFIG.read_text())
    model = build_teacher(cfg["class_path"], schema, {**cfg["model"], **SMALL})
    assert isinstance(model, MLPRanker) and isinstance(model.config, MLPRankerConfig)
    assert model.config.to_dict() == {**cfg["model"], **SMALL, "use_sequence": True,
                                      "max_history": cfg["model"]["max_history"],
                                      "shared_tables": None}
    out = model.eval()(random_batch(schema, b=16, seed=0))
    assert out.logits.shape == (16, len(schema.tasks))
