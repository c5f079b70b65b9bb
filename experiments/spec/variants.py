"""The spec's variants: the built-in ones by name, a variant's methods and teacher source, and
A/A twins (``twins:``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gemkd.experiments.spec.sections import PluginSpec
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import (
    TEACHER_SOURCES,
    TeacherSource,
)

#: KD whose temperature keeps the student's mean probability at the target's (losses.py)
_KD_CAL = {"class_path": "kd", "init_args": {"loss": "bce_cal"}}
BUILTIN_VARIANTS: dict[str, Any] = {
    "baseline": [],
    "kd": ["kd"],
    "kd_aux": ["kd", "aux_head"],
    "kd_aux_adapter": ["kd", "aux_head", "adapter"],
    "kd_repr": ["kd", "repr"],
    "hierarchical": {"teacher": "domain_fm", "methods": ["kd"]},
    # KD on an aux head + LoopFM codes; the Student Adapter left out: inside it, it did not pay
    # at lags 0/3/6 on the benchmark (docs/results/STALENESS.md; kd_aux_adapter keeps it)
    "full": ["kd", "aux_head", "repr"],
    # KD from a student whose embedding tables start from the teacher's (needs its checkpoint)
    "kd_share": ["kd", "param_share"],
    # KD with loss bce_cal, alone and on the Student Adapter's realigned targets
    "kd_cal": [_KD_CAL],
    "kd_adapter_cal": [_KD_CAL, "adapter"],
    # KD + SOLARIS pair representations (docs/guides/solaris.md)
    "kd_solaris": ["kd", "solaris"],
    # full + SOLARIS pair representations beside the LoopFM codes
    "full_solaris": ["kd", "aux_head", "repr", "solaris"],
}
#: The variants of a spec that names none: the first seven (the later ones are opt-in: kd_share
#: needs a teacher checkpoint, and each adds a search to every run)
DEFAULT_VARIANTS: tuple[str, ...] = ("baseline", "kd", "kd_aux", "kd_aux_adapter", "kd_repr",
                                     "hierarchical", "full")



@dataclass
class VariantSpec:
    """A variant: its transfer ``methods`` (in the order they run) and the ``teacher`` source
    they learn from (``gem``, or ``domain_fm`` for hierarchical transfer); ``twin_of`` marks an
    A/A twin (``twins:``), the same methods and teacher as the variant it names under another
    name, so its own search draw: the run's check of its false verdicts."""

    #: the variant's name (its key in ``variants``)
    name: str
    #: transfer methods in the order they run: built-in names (kd, aux_head, adapter, repr,
    #: param_share) or import paths, each optionally {class_path, init_args}; empty: labels only
    methods: list[PluginSpec] = field(default_factory=list)
    #: the teacher the methods learn from: the run's GEM, or the per-domain FM (hierarchical)
    teacher: TeacherSource = "gem"
    #: an A/A twin of this variant (the same methods and teacher; made by twins:), or null
    twin_of: str | None = None

    @classmethod
    def parse(cls, name: str, value: Any, where: str) -> VariantSpec:
        if isinstance(value, list):
            value = {"methods": value}
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: variant {name!r} must be a list of methods or a "
                              f"mapping with methods (and teacher), got {value!r}")
        from gemkd.transfer.config import unknown_key

        keys = [f for f in dataclasses.fields(cls) if f.name != "name"]  # the name is the key
        unknown = sorted(set(value) - {f.name for f in keys})
        if unknown:
            raise ConfigError(f"{where}: variant {name!r}: {unknown_key(unknown[0], keys)}")
        twin_of = value.get("twin_of")
        if twin_of is not None and not isinstance(twin_of, str):
            raise ConfigError(f"{where}: variant {name!r}: twin_of must be a variant's name, "
                              f"got {twin_of!r}")
        methods = value.get("methods") or []
        if not isinstance(methods, list):
            raise ConfigError(f"{where}: variant {name!r}: methods must be a list")
        teacher = value.get("teacher", "gem")
        if teacher not in TEACHER_SOURCES:
            raise ConfigError(f"{where}: variant {name!r}: teacher {teacher!r}; expected one of "
                              f"{', '.join(TEACHER_SOURCES)}")
        return cls(name, [PluginSpec.from_mapping(m, f"{where}.{name}[{i}]")
                          for i, m in enumerate(methods)], teacher, twin_of)

    def to_value(self) -> Any:
        methods = [m.to_dict() for m in self.methods]
        if self.twin_of is not None:
            return {**({} if self.teacher == "gem" else {"teacher": self.teacher}),
                    "methods": methods, "twin_of": self.twin_of}
        return methods if self.teacher == "gem" else {"teacher": self.teacher,
                                                       "methods": methods}


def twin_name(original: str, k: int) -> str:
    """The k-th A/A twin of ``original`` (1-based): ``kd_twin1``."""
    return f"{original}_twin{k}"


def expand_twins(variants: list[VariantSpec], twins: dict[str, int]) -> list[VariantSpec]:
    """``variants`` with ``twins[name]`` A/A twins of each named variant appended (the same
    methods and teacher, named :func:`twin_name`). A twin already listed (a spec.yaml written
    by a run) is kept as it is; any other variant of a twin's name is a clash, and a twin must
    be its original's copy. ValueErrors name the key."""
    by_name = {v.name: v for v in variants}
    for name, count in twins.items():
        if name not in by_name or by_name[name].twin_of is not None:
            raise ValueError(f"'twins': {name!r} is not a variant of the spec (variants: "
                             f"{', '.join(v.name for v in variants if v.twin_of is None)})")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"'twins': {name}: expected a number of twins >= 1, got {count!r}")
        for k in range(1, count + 1):
            twin = VariantSpec(twin_name(name, k), list(by_name[name].methods),
                               by_name[name].teacher, name)
            have = by_name.get(twin.name)
            if have is None:
                variants = [*variants, twin]
                by_name[twin.name] = twin
            elif have.twin_of != name:
                raise ValueError(f"'twins': {name}: {count} twin(s) would be named "
                                 f"{twin.name!r}, which the spec already uses for another "
                                 "variant; rename that variant")
    for v in variants:
        if v.twin_of is None:
            continue
        original = by_name.get(v.twin_of)
        if original is None or original.twin_of is not None:
            raise ValueError(f"variant {v.name!r}: twin_of {v.twin_of!r} is not a variant of "
                             "the spec (a twin's original cannot itself be a twin)")
        if (v.teacher, [m.to_dict() for m in v.methods]) != \
                (original.teacher, [m.to_dict() for m in original.methods]):
            raise ValueError(f"variant {v.name!r} is marked twin_of {v.twin_of!r} but its "
                             "methods or teacher differ: a twin is the same variant under "
                             "another name")
    return variants


def parse_variants(value: Any, where: str = "spec variants") -> list[VariantSpec]:
    """A list of built-in variant names, or a mapping name → methods (or {teacher, methods})."""
    if isinstance(value, list):
        unknown = [v for v in value if not isinstance(v, str) or v not in BUILTIN_VARIANTS]
        if unknown:
            raise ConfigError(f"{where}: unknown variant {unknown[0]!r}; built-in variants are "
                              f"{', '.join(BUILTIN_VARIANTS)} (define your own as a mapping "
                              "name: [methods])")
        value = {v: BUILTIN_VARIANTS[v] for v in value}
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{where}: expected a non-empty list of variant names or a mapping "
                          f"name: [methods], got {value!r}")
    return [VariantSpec.parse(str(k), v, where) for k, v in value.items()]
