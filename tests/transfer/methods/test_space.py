"""Knob ranges (gemkd.transfer.methods.space) and the variant search spaces the spec makes of them
(DESIGN §6 "Fair comparison")."""

from __future__ import annotations

from pathlib import Path

import pytest

from gemkd.experiments.run.methods import build_methods, check_variant, search_space
from gemkd.experiments.spec import load_spec, parse_variants
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import KD, Categorical, IntRange, LogUniform, Uniform
from gemkd.transfer.methods.space import as_range, method_space, resolve

ALPHA = Uniform(0.0, 1.0, default=0.5, natural_low=True, natural_high=True)


@pytest.mark.parametrize("make, message", [
    (lambda: LogUniform(0.0, 1.0), "log range needs low > 0"),
    (lambda: Uniform(1.0, 0.5), "low must be < high"),
    (lambda: Uniform(0.0, float("inf")), "high must be a finite number"),
    (lambda: IntRange(1.5, 4), "integer bounds"),
    (lambda: Categorical([]), "non-empty list"),
    (lambda: Categorical([16, 16]), "lists 16 twice"),
    (lambda: LogUniform(1.0, 8.0, default=10.0), "default 10.0 is outside"),
])
def test_bad_ranges_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_list_is_a_categorical_and_its_numbers_have_ends():
    rng = as_range([0.5, 1.0, 2.0])
    assert isinstance(rng, Categorical) and rng.default == 0.5
    assert rng.edge(2.0) == "high" and rng.edge(0.5) == "low" and rng.edge(1.0) is None
    assert as_range(["mean", "attention"]).edge("mean") is None  # choices have no ends
    assert Categorical([True, 1]).values == (True, 1)  # True is not 1


def test_edges_are_measured_in_the_ranges_own_scale_and_skip_natural_bounds():
    lam = LogUniform(1.0, 100.0)  # 5 % of the log span: 100 ** 0.95 = 79.4
    assert lam.edge(80.0) == "high" and lam.edge(70.0) is None and lam.edge(1.2) == "low"
    assert Uniform(0.0, 100.0).edge(80.0) is None  # linear: 80 is 20 % from the top
    assert ALPHA.edge(1.0) is None and ALPHA.edge(0.0) is None and ALPHA.edge(0.5) is None
    assert IntRange(4, 64, log=True).edge(61) == "high"


def test_spec_overrides_keep_natural_bounds_only_where_they_are_the_declared_ones():
    listed = resolve(ALPHA, [0.0, 0.5, 1.0])
    assert isinstance(listed, Categorical) and listed.edge(1.0) is None
    assert listed.edge(0.0) is None and listed.default == 0.5
    narrowed = resolve(ALPHA, {"low": 0.2, "high": 1.0})
    assert narrowed.edge(0.2) == "low" and narrowed.edge(1.0) is None
    lam = resolve(LogUniform(0.1, 100.0, default=1.0), {"low": 2, "high": 32})
    assert isinstance(lam, LogUniform) and lam.default is None  # log inherited; 1 is outside
    assert isinstance(resolve(IntRange(4, 64, log=True), {"low": 8, "high": 16}), IntRange)
    assert isinstance(resolve(ALPHA, {"low": 1, "high": 8, "int": True}), IntRange)
    with pytest.raises(ValueError, match="give a list"):
        resolve(Categorical(["mean", "attention"]), {"low": 0, "high": 1})
    with pytest.raises(ValueError, match=r"expected a list of values or \{low"):
        resolve(ALPHA, {"low": 0.5})


def _spec(*sets: str, variants: str = "variants=[kd, kd_aux_adapter, kd_repr]"):
    """draws: shared leaves the student's lr and EMA decay out of the spaces (tests/experiments/
    test_draws.py covers them), so these tests read the methods' own knobs."""
    return load_spec(None, ["tuning={draws: shared}", variants, *sets])


def test_builtin_spaces_by_default_and_with_spec_overrides():
    spec = _spec()
    kd, full, kd_repr = spec.variants
    assert search_space(spec, kd) == {"alpha": KD.tunable["alpha"],
                                      "temperature": KD.tunable["temperature"]}
    assert list(search_space(spec, full)) == ["adapter_hidden", "alpha", "aux_beta",
                                              "temperature"]
    assert list(search_space(spec, kd_repr)) == ["alpha", "temperature"]
    # naming kd_weight tunes λ instead of α (the older specs' lists keep working)
    spec = _spec("tuning.knobs.kd_weight=[0.5, 1.0, 2.0]",
                 "tuning.knobs.temperature={low: 1, high: 4}")
    space = search_space(spec, spec.variants[0])
    assert list(space) == ["kd_weight", "temperature"]
    assert space["kd_weight"].values == (0.5, 1.0, 2.0)
    assert isinstance(space["temperature"], LogUniform) and space["temperature"].high == 4


def test_fixing_either_form_in_init_args_stops_both_being_tuned():
    spec = _spec("tuning.knobs.kd_weight=[1.0, 2.0]",
                 variants="variants={a: [{class_path: kd, init_args: {kd_weight: 3.0}}], "
                          "b: [{class_path: kd, init_args: {alpha: 0.9}}]}")
    a, b = spec.variants
    assert list(search_space(spec, a)) == list(search_space(spec, b)) == ["temperature"]
    (method,) = build_methods(spec, b, {"temperature": 2.0})
    assert method.alpha == 0.9 and method.kd_weight == 0.9 and method.temperature == 2.0


@pytest.mark.parametrize("sets, message", [
    (["tuning.knobs.alpha={low: 0.5, high: 2}"], r"alpha=2 \(Uniform\(0.5, 2\)\) for method 'kd'.*"
                                           r"alpha must be in \[0, 1\]"),
    (["tuning.knobs.alpha=[0.5, 1.5]"], r"alpha=1.5 .*alpha must be in \[0, 1\]"),
    (["tuning.knobs.temperature={low: 0, high: 4}"],
     "knob 'temperature' .* log range needs low > 0"),
    (["tuning.knobs.adapter_hidden={low: 0, high: 8, log: false}"],
     "adapter_hidden=0 .* adapter_hidden >= 1"),
    (["tuning.knobs.alpha=[0.5]", "tuning.knobs.kd_weight=[1.0]"],
     "spec tuning names both 'alpha' and 'kd_weight'"),
])
def test_bad_spec_ranges_name_the_knob(sets, message):
    spec = _spec(*sets)
    with pytest.raises(ConfigError, match=message):
        for v in spec.variants:
            check_variant(spec, v)


def test_two_methods_tuning_one_knob_and_bad_declarations():
    spec = _spec(variants="variants={a: [kd, kd]}")
    with pytest.raises(ConfigError, match="both tune 'alpha'"):
        search_space(spec, spec.variants[0])
    with pytest.raises(ConfigError, match="declares knob 'w': expected a Range"):
        method_space("m", {"w": 0.5}, (), {})
    with pytest.raises(ConfigError, match="alternative to 'alpha', which it does not declare"):
        method_space("m", {"w": LogUniform(0.1, 1.0, alternative_to="alpha")}, (), {})


def test_a_plug_in_with_a_list_tunable_keeps_working(monkeypatch):
    spec = load_spec(None, ["tuning={knobs: {emb_weight: {low: 0.01, high: 1.0, log: true}}}"])
    (v,) = parse_variants({"mine": ["kd", "my_methods.embedding_kd.EmbeddingKD"]})
    # the docs' example plug-in, importable for this test only (undone after it)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[3] / "docs" / "examples"))
    space = search_space(spec, v)
    assert isinstance(space["emb_weight"], LogUniform) and "alpha" in space
    listed = search_space(load_spec(None, ["tuning={}"]), v)["emb_weight"]
    assert listed.values == (0.1, 1.0)
