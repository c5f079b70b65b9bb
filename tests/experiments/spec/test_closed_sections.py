"""The spec's sections are closed: an undeclared key is an error naming the section, the key and
the known keys (with the closest one); keys of the config a section points at go under its
``overrides`` (tuning's knob ranges under ``knobs``); ``to_dict`` is read from the fields, and a
run's spec.yaml written before the sections were closed still reads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from gemkd.experiments.spec import load_spec, spec_from_mapping
from gemkd.experiments.spec.load import nest_open_keys
from gemkd.experiments.spec.sections import DataSpec, TeacherSpec, TuningSpec
from gemkd.transfer.errors import ConfigError


@pytest.mark.parametrize(("section", "key", "known", "hint"), [
    ("data", "examples_per_day", "overrides, preset, seeds, source, src",
     "a key of the source's own config goes under 'overrides'"),
    ("teacher", "max_seq_len", "config, overrides, store",
     "a key of the teacher config goes under 'overrides'"),
    ("hierarchical", "init_from", "config, overrides, store",
     "a key of the teacher config goes under 'overrides'"),
    ("tuning", "kd_weight", "batch, draws, knobs, sampler, seed, seeds, trials",
     "a knob's range goes under 'knobs'"),
    ("tuning", "trails", "batch, draws, knobs, sampler, seed, seeds, trials",
     "did you mean 'trials'?"),
    ("bootstrap", "sample", "samples, seed", "did you mean 'samples'?"),
    ("repr", "dims", "bits, code_dim, epochs, layer, max_events", None),
])
def test_an_undeclared_key_names_the_section_the_key_and_the_known_keys(section, key, known,
                                                                         hint):
    with pytest.raises(ConfigError) as e:
        spec_from_mapping({section: {key: 1}}, "my.yaml")
    want = f"my.yaml: key {section!r}: unknown key {key!r}; valid keys: {known}"
    assert str(e.value) == want + (f" ({hint})" if hint else "")


def test_the_keys_and_to_dict_come_from_the_fields():
    """A new field is a key and in spec.yaml with nothing else to edit; a quiet field (a key
    newer than the run tags, or an empty mapping) is left out at its default."""
    spec = spec_from_mapping({
        "data": {"preset": "tiny", "overrides": {"seed": 3}},
        "teacher": {"config": "tiny", "overrides": {"max_epochs": 1}},
        "tuning": {"trials": 2, "knobs": {"kd_weight": [1.0]}, "batch": 2}})
    out = spec.to_dict()
    names = [f.name for f in dataclasses.fields(spec)]
    assert list(out) == [n for n in names if n not in ("primary", "twins", "robustness")]
    assert out["data"] == {"source": "synthetic", "preset": "tiny", "overrides": {"seed": 3}}
    assert out["teacher"] == {"config": "tiny", "overrides": {"max_epochs": 1}}
    assert out["hierarchical"] == {"config": "domain_fm"}  # no store, no overrides
    assert out["tuning"] == {"sampler": "tpe", "trials": 2, "seeds": 1, "draws": "per_seed",
                             "batch": 2, "knobs": {"kd_weight": [1.0]}}
    assert spec_from_mapping(out).to_dict() == out  # spec.yaml reads back as the same spec
    for cls in (DataSpec, TeacherSpec, TuningSpec):
        assert set(cls().to_dict()) <= {f.name for f in dataclasses.fields(cls)}


def test_a_spec_yaml_of_an_earlier_version_reads_as_it_did(tmp_path):
    """A run directory's spec.yaml written with the overrides inline (before the sections were
    closed) is read with them moved under overrides / knobs; a spec file given to ``gemkd run``
    is not."""
    old = {"name": "old", "data": {"source": "synthetic", "preset": "tiny", "seed": 3},
           "teacher": {"config": "tiny", "max_steps": 5},
           "hierarchical": {"config": "tiny", "init_from": "gem", "overrides": {"lr": 0.1}},
           "tuning": {"trials": 2, "kd_weight": [1.0]}, "seeds": [0]}
    assert nest_open_keys(old) == {
        "name": "old", "data": {"source": "synthetic", "preset": "tiny", "overrides": {"seed": 3}},
        "teacher": {"config": "tiny", "overrides": {"max_steps": 5}},
        "hierarchical": {"config": "tiny", "overrides": {"lr": 0.1, "init_from": "gem"}},
        "tuning": {"trials": 2, "knobs": {"kd_weight": [1.0]}}, "seeds": [0]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(old))
    spec = load_spec(path, written_by_run=True)
    assert spec.data.overrides == {"seed": 3} and spec.tuning.knobs == {"kd_weight": [1.0]}
    assert nest_open_keys(spec.to_dict()) == spec.to_dict()  # this version's: unchanged
    with pytest.raises(ConfigError, match="key 'data': unknown key 'seed'"):
        load_spec(path)


def test_a_path_under_overrides_is_read_from_where_it_was_written(tmp_path, monkeypatch):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"data": {"source": "import", "src": "log.csv",
                                             "overrides": {"mapping": "map.yaml"}}}))
    spec = load_spec(path)
    assert spec.data.overrides["mapping"] == str(tmp_path / "map.yaml")
    monkeypatch.chdir(tmp_path / "..")
    spec = load_spec(path, ["data.overrides.mapping=m/x.yaml",
                            "hierarchical.overrides={init_from: gem}"])
    assert spec.data.overrides["mapping"] == str(Path.cwd() / "m" / "x.yaml")
    assert spec.hierarchical.overrides == {"init_from": "gem"}  # a word, not a path


def test_a_variants_keys_are_its_fields():
    with pytest.raises(ConfigError) as e:
        spec_from_mapping({"variants": {"mine": {"method": ["kd"]}}}, "my.yaml")
    assert str(e.value).endswith("variant 'mine': unknown key 'method'; valid keys: methods, "
                                 "teacher, twin_of (did you mean 'methods'?)")
