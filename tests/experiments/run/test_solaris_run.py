"""``gemkd run`` of kd_solaris on the tiny world: the pair step runs once per lag, its
measurements are written, and the variant trains and is evaluated."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.experiments.spec import BUILTIN_VARIANTS, RunSpec, spec_from_mapping
from gemkd.transfer.errors import ConfigError

SPEC = {
    "name": "tinysolaris", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 32, "max_steps": 30}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [16]}},
    "student_tasks": ["click"], "variants": ["baseline", "kd_solaris"],
    "tuning": {"trials": 1}, "solaris": {"k": 4, "policy": "popular"},
}


def test_kd_solaris_is_built_in_but_not_a_default():
    assert "kd_solaris" in BUILTIN_VARIANTS
    spec = spec_from_mapping({"variants": ["kd_solaris", "full_solaris", "full"]})
    assert [m.class_path for m in spec.variant("kd_solaris").methods] == ["kd", "solaris"]
    # full keeps no Student Adapter (it did not pay inside full); full_solaris adds the pairs
    assert [m.class_path for m in spec.variant("full").methods] == ["kd", "aux_head", "repr"]
    assert [m.class_path for m in spec.variant("full_solaris").methods] == [
        "kd", "aux_head", "repr", "solaris"]
    assert "kd_solaris" not in RunSpec().variant_names
    assert "full_solaris" not in RunSpec().variant_names


def test_bad_policy_fails_before_the_run(tmp_path):
    from gemkd.experiments.run.preflight import check_spec

    spec = spec_from_mapping({**SPEC, "solaris": {"policy": "nope"}})
    with pytest.raises(ConfigError, match="speculation policy"):
        check_spec(spec)


@pytest.mark.slow
def test_kd_solaris_trains_and_evaluates(tmp_path):
    """kd_solaris, and full_solaris with the LoopFM codes beside the pairs, train and score."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "variants": ["baseline", "kd_solaris",
                                                         "full_solaris"],
                                    "repr": {"code_dim": 4, "max_events": 10, "epochs": 1}}))
    out = tmp_path / "out"
    assert main(["run", str(spec), "--out", str(out), "--threads", "1"]) == 0
    df = pd.read_csv(out / "results.csv")
    sol = df[(df.variant == "kd_solaris") & (df.domain == "all")]
    assert len(sol) == 1 and 0.5 < sol["ne"].iloc[0] < 1.5
    both = df[(df.variant == "full_solaris") & (df.domain == "all")]
    assert len(both) == 1 and 0.5 < both["ne"].iloc[0] < 1.5
    assert both["ne"].iloc[0] != sol["ne"].iloc[0]
    (step,) = out.glob("cache/pairs-*")
    m = json.loads((step / "measurements.json").read_text())
    assert [r["day"] for r in m["days"] if r["k"] == 4] == [3, 4, 5]
    assert all(0 <= r["hit_rate"] <= 1 for r in m["days"])
    assert "solaris day 5" in (out / "log.txt").read_text()


def test_the_pair_step_keys_kd_solaris_runs_only(tmp_path):
    """A new pair store (other k, policy, teacher) redoes kd_solaris's runs and no other's."""
    from gemkd.experiments.run.inputs import inputs_tag, variant_tag
    from gemkd.experiments.run.jobs import InputPaths

    spec = spec_from_mapping(SPEC)
    stores = {"gem": tmp_path / "store-a" / "store"}
    a = InputPaths(stores, pairs=tmp_path / "pairs-1" / "pairs")
    b = InputPaths(stores, pairs=tmp_path / "pairs-2" / "pairs")
    sol, base = spec.variant("kd_solaris"), spec.variant("baseline")
    assert variant_tag("c", spec, sol, a) != variant_tag("c", spec, sol, b)
    assert variant_tag("c", spec, base, a) == variant_tag("c", spec, base, b)
    other_k = spec_from_mapping({**SPEC, "solaris": {"k": 2}})
    assert inputs_tag(spec, a, 1) == inputs_tag(other_k, a, 1)
