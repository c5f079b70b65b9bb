"""Constraints declared beside their fields (gemkd.transfer.constraints): the one validator reads
the rules of plain and optional fields, skips nulls, names every broken rule once; the spec and
the configs carry their rules there and keep their messages."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Annotated

import pytest

from gemkd.experiments.spec import run_spec as spec_model
from gemkd.experiments.spec import spec_from_mapping
from gemkd.experiments.teacher.teacher_config import TeacherTrainConfig
from gemkd.teachers.gem.gem_config import GEMConfig
from gemkd.transfer.config import build_dataclass
from gemkd.transfer.constraints import (
    Rule,
    at_least,
    check_fields,
    field_problems,
    field_rules,
    half_open,
    int_at_least,
    unique,
)
from gemkd.transfer.data.synth.synth_config import SynthConfig
from gemkd.transfer.errors import ConfigError

_PAIR = at_least(0, "keys 'a' and 'b' must be >= 0, got {obj.a} and {obj.b}")


@dataclass
class _Box:
    a: Annotated[int, _PAIR] = 0
    b: Annotated[int, _PAIR] = 0
    days: Annotated[list[int], half_open("{key!r}: bad range {value}", first=0)] = \
        dataclasses.field(default_factory=lambda: [0, 1])
    width: Annotated[int, int_at_least(1, "{key} must be an integer >= 1, got {value!r}")] \
        | None = None
    tags: Annotated[list[str], Rule(bool, "{key}: empty"), unique("{key}: twice {value}")] = \
        dataclasses.field(default_factory=lambda: ["x"])
    free: int = 0

    def __post_init__(self) -> None:
        check_fields(self)


def test_rules_are_read_from_plain_and_optional_annotations():
    assert [name for name, _ in field_rules(_Box)] == ["a", "b", "days", "width", "tags"]
    assert typing.get_type_hints(_Box)["width"] == int | None  # the plain type for the checker
    assert field_problems(_Box()) == [] and field_problems(_Box(width=None)) == []


def test_each_broken_rule_is_named_once_in_field_order():
    with pytest.raises(ValueError, match=r"^'days': bad range \[2, 1\]; width must be an integer "
                                         r">= 1, got 0$"):
        _Box(days=[2, 1], width=0)
    # one message for two fields, with both values; a bool is not a count; wrong types fail
    box = _Box()
    box.a, box.b, box.width = -1, -2, True
    assert field_problems(box) == ["keys 'a' and 'b' must be >= 0, got -1 and -2",
                                   "width must be an integer >= 1, got True"]
    box = _Box()
    box.days, box.tags = [-1, 3], []
    assert field_problems(box) == ["'days': bad range [-1, 3]", "tags: empty"]
    box.days, box.tags, box.a = "ab", ["x", "x"], "7"
    assert field_problems(box) == ["keys 'a' and 'b' must be >= 0, got 7 and 0",
                                   "'days': bad range ab", "tags: twice ['x', 'x']"]


def test_build_dataclass_names_the_source_of_a_broken_rule():
    with pytest.raises(ConfigError, match=r"^box.yaml: width must be an integer >= 1, got 0$"):
        build_dataclass(_Box, {"width": 0}, "box.yaml")


def test_field_rules_needs_a_dataclass():
    with pytest.raises(TypeError, match="not a dataclass"):
        field_rules(int)


@pytest.mark.parametrize(("values", "message"), [
    ({"seeds": []}, "'seeds' must list at least one seed"),
    ({"seeds": [1, 1]}, r"'seeds' lists a seed twice: \[1, 1\]"),
    ({"eval_days": [14, 12]}, r"'eval_days' must be a half-open range \[first, end\), got "
                              r"\[14, 12\]"),
    ({"batch_size": 0}, "'batch_size' must be >= 1 and 'lr' > 0"),
    ({"lr": 0.0}, "'batch_size' must be >= 1 and 'lr' > 0"),
    ({"ema_decay": 1.0}, r"'ema_decay' must be in \(0, 1\) or null, got 1.0"),
    ({"teacher_val_days": -1}, "'teacher_val_days' must be >= 0, got -1"),
    ({"tuning": {"trials": 0}}, "keys 'trials' and 'seeds' must be >= 1"),
    ({"tuning": {"batch": 0}}, r"key 'batch' must be an int >= 1 \(candidates asked"),
    ({"bootstrap": {"samples": 10}}, "bootstrap: key 'samples' must be >= 100, got 10"),
    ({"solaris": {"k": 0}}, "'k' must be an int >= 1, got 0"),
    ({"data": {"preset": "tiny", "seeds": [3, 3]}},
     r"key 'seeds' must list at least one world seed, each once, got \[3, 3\]"),
])
def test_the_spec_keeps_its_messages(values, message):
    with pytest.raises(ConfigError, match=message):
        spec_from_mapping(values, "s.yaml")


def test_the_spec_and_configs_declare_their_rules_beside_their_fields():
    def ruled(cls):
        return {name for name, _ in field_rules(cls)}

    assert {"seeds", "student_days", "eval_days", "student_tasks", "batch_size", "lr",
            "accelerator", "ema_decay", "teacher_protocol", "teacher_val_days"} <= \
        ruled(spec_model.RunSpec)
    assert {"trials", "seeds", "batch", "sampler"} <= ruled(spec_model.TuningSpec)
    assert {"train_days", "val_days", "batch_size", "prefetch", "num_workers", "select",
            "patience", "max_seq_len"} <= ruled(TeacherTrainConfig)
    assert {"d", "n_cls", "pyramid_chunk", "dropout", "kernel", "use_sequence"} <= \
        ruled(GEMConfig)
    assert {"n_days", "drift", "organic_share"} <= ruled(SynthConfig)
    with pytest.raises(ValueError, match="key 'organic_share' must be in \\[0, 1\\], got 2"):
        SynthConfig(organic_share=2)
    with pytest.raises(ValueError, match="key 'patience' must be >= 1, got 0"):
        TeacherTrainConfig(patience=0, val_days=[1, 2])
