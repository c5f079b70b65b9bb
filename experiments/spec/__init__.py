"""The experiment spec: typed, nested dataclasses loaded from one YAML file (DESIGN §6.1)."""

from gemkd.experiments.spec.load import apply_sets, load_spec, parse_set, spec_from_mapping
from gemkd.experiments.spec.run_spec import (
    BUILTIN_VARIANTS,
    DEFAULT_VARIANTS,
    DataSpec,
    PluginSpec,
    ReprSpec,
    RunSpec,
    TeacherSpec,
    VariantSpec,
    parse_variants,
)

__all__ = ["BUILTIN_VARIANTS", "DEFAULT_VARIANTS", "DataSpec", "PluginSpec", "ReprSpec", "RunSpec",
           "TeacherSpec", "VariantSpec", "apply_sets", "load_spec", "parse_set", "parse_variants",
           "spec_from_mapping"]
