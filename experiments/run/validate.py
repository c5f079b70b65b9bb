"""Every check of a spec before any work starts (a typo is one error up front, not a failure
after minutes of teacher training that leaves a half-made run directory)."""

from __future__ import annotations

from adapters.methods import BUILTIN_METHODS
from experiments.run import steps
from experiments.run.methods import check_variant, method_class, variant_needs
from experiments.spec.model import PluginSpec, RunSpec
from transfer.errors import ConfigError


def check_spec(spec: RunSpec) -> None:
    """Build every section once: data source, teacher configs per lag, the hierarchical FM's,
    every variant's methods and tuning lists, the student class and its init_args."""
    from students.registry import check_init_args, resolve_student_class

    steps.data_plan(spec)
    for lag in spec.lags:
        if spec.teacher.store is None:
            steps.teacher_config(spec, lag, spec.teacher)
        if any(v.teacher == "domain_fm" for v in spec.variants):
            steps.teacher_config(spec, lag, spec.hierarchical)
    if spec.teacher.store is not None:
        if spec.teacher.overrides or len(spec.lags) > 1:
            raise ConfigError("spec teacher.store: an imported store is one fixed teacher; "
                              "it takes no other teacher keys and no lag sweep")
        if any("teacher_weights" in variant_needs(v) for v in spec.variants):
            raise ConfigError("spec teacher.store: parameter sharing needs a teacher "
                              "checkpoint, and an imported store has none")
    names = spec.variant_names
    if len(set(names)) != len(names):
        raise ConfigError(f"spec variants: a variant is named twice in {names}")
    # a list for a knob that no variant of this run tunes is fine (variants trimmed with --set);
    # one that no method knows is a typo
    tuned = {k for name in BUILTIN_METHODS for k in method_class(PluginSpec(name)).tunable}
    for variant in spec.variants:
        check_variant(spec, variant)
        tuned |= {k for m in variant.methods for k in method_class(m).tunable}
    unknown = sorted(set(spec.tuning) - tuned)
    if unknown:
        raise ConfigError(f"spec tuning: unknown key {unknown[0]!r}; the methods tune: "
                          f"{', '.join(sorted(tuned))}")
    init_args = dict(spec.student.init_args)
    if any("codes" in variant_needs(v) for v in spec.variants):
        init_args["repr_dim"] = spec.repr.code_dim
    check_init_args(resolve_student_class(spec.student.class_path), init_args)
