"""GEMConfig: GEM's hyper-parameters as a typed, frozen dataclass checked like the spec; GEM built
from it or from its keys is the same model, and the shipped YAML configs still build."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from gemkd.teachers import GEM, DomainFM
from gemkd.teachers.gem import GEMConfig
from gemkd.teachers.teacher_registry import build_teacher
from gemkd.transfer.errors import ConfigError
from tests.teachers.helpers import TINY, random_batch, tiny_schema

CONFIGS = Path(__file__).resolve().parents[3] / "experiments" / "teacher" / "configs"


@pytest.fixture(scope="module")
def schema():
    return tiny_schema()


def test_the_fields_are_the_model_keys():
    names = [f.name for f in dataclasses.fields(GEMConfig)]
    assert GEM.hparam_names() == names and len(names) == 30
    assert DomainFM.hparam_names() == ["domain", *names]


def test_frozen_and_checked_on_construction():
    cfg = GEMConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d = 16  # type: ignore[misc]
    with pytest.raises(ValueError, match="d=10 must be divisible by n_heads=4"):
        GEMConfig(d=10, n_heads=4)
    with pytest.raises(ValueError, match="kernel must be one of"):
        GEMConfig(kernel="cuda")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_layers must be an integer >= 1, got 0"):
        GEMConfig(n_layers=0)


@pytest.mark.parametrize(("values", "message"), [
    ({"d": 8, "n_layer": 2}, r"GEM: unknown key 'n_layer'; valid keys: "),
    ({"d": "8"}, r"GEM: key 'd': expected an integer, got '8'"),
    ({"head_type": "mmoe"}, r"GEM: key 'head_type': expected one of \['domain_task', "
                            r"'domain_gated'\], got 'mmoe'"),
    ({"kernel": "cuda"}, r"key 'kernel': expected one of \['auto', 'torch', 'triton'\]"),
    ({"use_sequence": "yes"}, r"key 'use_sequence': expected true or false, got 'yes'"),
    ({"dropout": 1.0}, r"GEM: dropout must be in \[0, 1\), got 1.0"),
    ({"n_recent": 20, "pyramid_recent": 8}, r"GEM: n_recent=20 exceeds pyramid_recent=8"),
])
def test_a_bad_key_or_value_is_a_config_error_naming_it(values, message):
    with pytest.raises(ConfigError, match=message):
        GEMConfig.from_mapping(values)


def test_ints_become_floats_where_a_float_is_expected():
    cfg = GEMConfig.from_mapping({"pyramid_shrink": 3, "dropout": 0})
    assert cfg.pyramid_shrink == 3.0 and isinstance(cfg.pyramid_shrink, float)


def test_a_config_and_its_keys_build_the_same_model(schema):
    torch.manual_seed(0)
    by_keys = GEM(schema, **TINY)
    torch.manual_seed(0)
    by_config = GEM(schema, GEMConfig(**TINY))
    assert by_keys.config == by_config.config
    a, b = by_keys.state_dict(), by_config.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    # keys beside a config replace its values, checked as a mapping is
    assert GEM(schema, GEMConfig(**TINY), n_layers=1).config.n_layers == 1
    with pytest.raises(ConfigError, match="GEM: key 'n_layers': expected an integer"):
        GEM(schema, GEMConfig(**TINY), n_layers="one")
    with pytest.raises(ConfigError, match="config must be a GEMConfig"):
        GEM(schema, dict(TINY))  # type: ignore[arg-type]


def test_the_models_config_is_resolved_for_its_schema(schema):
    model = GEM(schema, **TINY)
    assert isinstance(model.config, GEMConfig)
    assert model.config.use_sequence is True and model.config.max_history == schema.max_history
    assert GEM(schema, **TINY, max_history=5).config.max_history == 5


def test_schema_rules_name_the_model(schema):
    with pytest.raises(ConfigError, match="GEM: use_wukong and use_sequence are both false"):
        GEM(schema, use_wukong=False, use_sequence=False)
    with pytest.raises(ConfigError, match="DomainFM: n_cls must be >= 1"):
        DomainFM(schema, n_cls=0)


@pytest.mark.parametrize("name", ["tiny", "small", "small_lean", "base", "domain_fm"])
def test_shipped_yaml_configs_build_and_round_trip(schema, name):
    """A teacher config's ``model:`` (as old run directories' config.yaml hold it) builds by
    class path, and the built config dumps to YAML and reads back unchanged."""
    cfg = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    model = build_teacher(cfg.get("class_path", "gem"), schema, cfg["model"])
    dumped = yaml.safe_load(yaml.safe_dump(model.config.to_dict()))
    assert type(model.config).from_mapping(dumped) == model.config
    out = model.eval()(random_batch(schema, b=4, seed=1))
    assert out.logits.shape == (4, len(schema.tasks))


def test_small_lean_is_small_with_a_cheaper_sequence_arm():
    """small_lean must follow small's recipe: only its sequence arm's two keys (and
    its name) differ, so its NE check against small stays the evidence."""
    small, lean = (yaml.safe_load((CONFIGS / f"{n}.yaml").read_text())
                   for n in ("small", "small_lean"))
    diff = {k for k in small["model"] if small["model"][k] != lean["model"].get(k)}
    assert diff == {"max_history", "pyramid_shrink"} and small["model"].keys() == \
        lean["model"].keys()
    assert (lean["model"]["max_history"], lean["model"]["pyramid_shrink"]) == (256, 4.0)
    rest = {k for k in small.keys() | lean.keys() if k != "model" and small.get(k) != lean.get(k)}
    assert rest == {"name"}


def test_shared_tables_are_copied():
    tables = {"hist_item": "ad_id"}
    cfg = GEMConfig(shared_tables=tables)
    tables["hist_item"] = "other"
    assert cfg.shared_tables == {"hist_item": "ad_id"}
