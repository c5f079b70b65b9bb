"""Every choice list is a ``Literal`` in one place (gemkd.transfer.options), its tuple derived from
it, and a spec or teacher config with a value outside it is an error naming the key, the value
and the choices."""

from __future__ import annotations

import ast
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest

from gemkd.experiments.spec import run_spec as spec_model
from gemkd.experiments.spec import spec_from_mapping
from gemkd.experiments.teacher.teacher_config import TeacherTrainConfig
from gemkd.transfer import options
from gemkd.transfer.config import build_dataclass
from gemkd.transfer.errors import ConfigError


@pytest.mark.parametrize(("kind", "values"), [
    (options.TeacherProtocol, options.PROTOCOLS),
    (options.Accelerator, options.ACCELERATORS),
    (options.Sampler, options.SAMPLERS),
    (options.Kernel, options.KERNELS),
    (options.HeadType, options.HEAD_TYPES),
    (options.TrackerKind, options.TRACKERS),
    (options.ExecutorName, options.EXECUTORS),
    (options.TeacherSource, options.TEACHER_SOURCES),
    (options.TuningDraws, options.TUNING_DRAWS),
    (options.EpochSelect, options.SELECTS),
    (options.JoinPolicy, options.JOIN_POLICIES),
    (options.ColumnType, ("str", "int", "float")),
])
def test_each_tuple_is_its_literal(kind, values):
    assert typing.get_origin(kind) is typing.Literal
    assert values == typing.get_args(kind) and len(values) == len(set(values))


def test_the_users_read_the_one_list():
    from gemkd.teachers.gem import heads
    from gemkd.transfer import ops

    assert ops.KERNELS is options.KERNELS and heads.HEAD_TYPES is options.HEAD_TYPES
    hints = typing.get_type_hints(spec_model.RunSpec)
    assert hints["teacher_protocol"] is options.TeacherProtocol
    assert hints["accelerator"] is options.Accelerator
    assert typing.get_type_hints(spec_model.TuningSpec)["sampler"] is options.Sampler
    assert typing.get_type_hints(TeacherTrainConfig)["accelerator"] is options.Accelerator
    assert typing.get_type_hints(TeacherTrainConfig)["select"] is options.EpochSelect
    assert typing.get_type_hints(spec_model.TuningSpec)["draws"] is options.TuningDraws
    assert typing.get_type_hints(spec_model.VariantSpec)["teacher"] is options.TeacherSource
    from gemkd.experiments.run import executors
    from gemkd.transfer.store import join

    assert executors.EXECUTORS is options.EXECUTORS and join.JOIN_POLICIES is options.JOIN_POLICIES


def test_no_literal_type_is_defined_outside_options():
    """DESIGN §1: ``X = Literal[...]`` appears in transfer/options.py only."""
    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("transfer", "teachers", "students", "adapters", "experiments", "gemkd"):
        for path in sorted((root / package).rglob("*.py")):
            if path == root / "transfer" / "options.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                value = getattr(node, "value", None) if isinstance(
                    node, (ast.Assign, ast.AnnAssign)) else None
                if (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)
                        and value.value.id == "Literal"):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []


@pytest.mark.parametrize(("key", "value", "choices"), [
    ("teacher_protocol", "stream", options.PROTOCOLS),
    ("accelerator", "tpu", options.ACCELERATORS),
])
def test_a_spec_value_outside_its_choices_names_key_value_and_choices(key, value, choices):
    with pytest.raises(ConfigError) as e:
        spec_from_mapping({key: value}, "my.yaml")
    msg = str(e.value)
    assert f"my.yaml: key {key!r}" in msg and repr(value) in msg
    assert all(repr(c) in msg for c in choices)


def test_a_bad_sampler_names_the_section_key_and_choices():
    with pytest.raises(ConfigError) as e:
        spec_from_mapping({"tuning": {"sampler": "cmaes"}}, "my.yaml")
    msg = str(e.value)
    assert "key 'tuning'" in msg and "key 'sampler'" in msg and "'cmaes'" in msg
    assert all(repr(c) in msg for c in options.SAMPLERS)


def test_a_bad_variant_teacher_names_the_choices():
    with pytest.raises(ConfigError, match="teacher 'fm'; expected one of gem, domain_fm"):
        spec_from_mapping({"variants": {"mine": {"teacher": "fm", "methods": ["kd"]}}})


@pytest.mark.parametrize(("key", "value"), [("accelerator", "tpu"), ("select", "first"),
                                            ("precision", "bf16")])
def test_a_teacher_config_value_outside_its_choices(key, value):
    with pytest.raises(ConfigError) as e:
        build_dataclass(TeacherTrainConfig, {key: value}, "tiny.yaml")
    assert f"tiny.yaml: key {key!r}" in str(e.value) and repr(value) in str(e.value)


@dataclass
class _Choosy:
    kernel: options.Kernel = "auto"
    heads: options.HeadType | None = None


def test_build_dataclass_checks_literal_fields_and_optional_literals():
    assert build_dataclass(_Choosy, {"kernel": "torch", "heads": None}).kernel == "torch"
    assert build_dataclass(_Choosy, {"heads": "domain_gated"}).heads == "domain_gated"
    with pytest.raises(ConfigError, match=r"c.yaml: key 'kernel': expected one of \['auto', "
                                          r"'torch', 'triton'\], got 'cuda'"):
        build_dataclass(_Choosy, {"kernel": "cuda"}, "c.yaml")
    with pytest.raises(ConfigError, match="key 'heads': expected one of"):
        build_dataclass(_Choosy, {"heads": "mmoe"}, "c.yaml")


@pytest.mark.parametrize(("cls", "key", "value"), [
    (spec_model.RunSpec, "teacher_protocol", "online"),
    (spec_model.RunSpec, "keep_students", "best"),
    (spec_model.RunSpec, "table_optimizer", "adam"),
    (spec_model.TuningSpec, "sampler", "cmaes"),
    (TeacherTrainConfig, "select", "first"),
])
def test_a_literal_field_is_checked_from_its_type_when_built_directly(cls, key, value):
    """The check and its message come from the ``Literal`` (no hand-written list of choices):
    an instance built without the YAML validator is refused naming the key, every choice and
    the value."""
    kind = typing.get_type_hints(cls)[key]
    choices = ", ".join(typing.get_args(kind))
    with pytest.raises(ValueError, match=f"{key} must be one of {choices}, got {value!r}"):
        cls(**{key: value})


def test_no_spec_or_config_module_lists_a_literals_choices_again():
    """``one_of`` is for value sets that are not a type; a Literal field's rule is derived."""
    import inspect

    from gemkd.teachers.gem.gem_config import GEMConfig

    spec_dir = Path(inspect.getfile(spec_model)).parent
    paths = [*sorted(spec_dir.glob("*.py")), Path(inspect.getfile(TeacherTrainConfig)),
             Path(inspect.getfile(GEMConfig))]
    calls = [f"{p.name}:{node.lineno}" for p in paths
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "one_of"]
    assert calls == []
