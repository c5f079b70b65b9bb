"""The spec's ``primary:`` family and ``twins:`` (A/A twins): parsing, clear errors, and the
spec.yaml round trip (gemkd.experiments.spec.primary, model.expand_twins)."""

from __future__ import annotations

import pytest
import yaml

from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.transfer.errors import ConfigError

VARIANTS = ["baseline", "kd", "kd_aux", "hierarchical"]


def test_twins_copy_their_original_and_survive_the_spec_yaml_round_trip():
    spec = spec_from_mapping({"variants": VARIANTS, "twins": {"kd": 2, "hierarchical": 1}})
    assert spec.variant_names == [*VARIANTS, "kd_twin1", "kd_twin2", "hierarchical_twin1"]
    twin = spec.variant("hierarchical_twin1")
    assert twin.twin_of == "hierarchical" and twin.teacher == "domain_fm"
    assert twin.methods == spec.variant("hierarchical").methods
    assert spec.variant("kd").twin_of is None
    written = spec.to_dict()
    assert written["twins"] == {"kd": 2, "hierarchical": 1}
    assert written["variants"]["kd_twin1"] == {"methods": ["kd"], "twin_of": "kd"}
    again = spec_from_mapping(yaml.safe_load(yaml.safe_dump(written, sort_keys=False)))
    assert again.variants == spec.variants and again.to_dict() == written


def test_primary_round_trips_and_unset_keys_leave_spec_yaml_as_before():
    primary = {"comparisons": ["kd_aux vs kd", "kd vs baseline"], "task": "conversion"}
    spec = spec_from_mapping({"variants": VARIANTS, "primary": primary})
    assert spec.primary.pairs() == [("kd_aux", "kd"), ("kd", "baseline")]
    assert spec.to_dict()["primary"] == primary
    assert spec_from_mapping(spec.to_dict()).primary == spec.primary
    plain = RunSpec().to_dict()
    assert "primary" not in plain and "twins" not in plain  # the inputs tag as before


@pytest.mark.parametrize("values, message", [
    ({"twins": {"kd": 0}}, r"'twins': kd: expected a number of twins >= 1, got 0"),
    ({"twins": {"nope": 1}}, r"'twins': 'nope' is not a variant of the spec"),
    ({"variants": {"kd": ["kd"], "kd_twin1": ["kd", "aux_head"]}, "twins": {"kd": 1}},
     r"would be named 'kd_twin1', which the spec already uses for another variant"),
    ({"variants": {"kd": ["kd"], "copy": {"methods": [], "twin_of": "kd"}}},
     r"variant 'copy' is marked twin_of 'kd' but its methods or teacher differ"),
    ({"variants": {"kd": ["kd"], "copy": {"methods": ["kd"], "twin_of": "kdd"}}},
     r"twin_of 'kdd' is not a variant of the spec"),
    ({"primary": {"comparisons": ["kd_aux kd"]}},
     r"key 'comparisons'\[0\]: expected a comparison 'A vs B'"),
    ({"primary": {"comparisons": ["kd vs kd"]}}, r"compares a variant with itself"),
    ({"primary": {"comparisons": ["kd_aux vs kd", "kd vs kd_aux"]}},
     r"lists kd and kd_aux twice"),
    ({"primary": {"comparisons": ["full vs kd"]}}, r"names 'full', not a variant of the spec"),
    ({"twins": {"kd": 1}, "primary": {"comparisons": ["kd_twin1 vs kd"]}},
     r"names the A/A twin 'kd_twin1'"),
    ({"primary": {"lag": 3}}, r"'primary': lag 3 is not one of teacher_lag_days \[0\]"),
    ({"primary": {"task": "buy"}}, r"'primary': task 'buy' is not one of student_tasks"),
    ({"student_domain": "feed", "primary": {"domain": "ads"}},
     r"'primary': domain 'ads': the student serves 'feed' only"),
    ({"primary": {"level": 0.9}}, r"unknown key 'level'; valid keys: comparisons, domain"),
])
def test_bad_primary_and_twins_name_the_key(values, message):
    with pytest.raises(ConfigError, match=message) as e:
        spec_from_mapping({"variants": VARIANTS, **values}, "exp.yaml")
    assert str(e.value).startswith("exp.yaml: ")
