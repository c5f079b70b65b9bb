"""A variant's transfer methods: resolved from the spec, their search space, built per run.

Methods are named by a built-in name (``gemkd.adapters.methods.BUILTIN_METHODS``) or an import
path (DESIGN §5.1). A method's knobs are its ``__init__`` arguments; those its ``tunable``
declares (ranges, :mod:`gemkd.transfer.methods.space`) are searched — over the spec's ``tuning:``
list or range for that knob, else the declared range — unless the variant fixes them in
``init_args``: :func:`search_space`, explored by :mod:`gemkd.experiments.run.search` with the
same number of trials for every variant.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gemkd.adapters.methods import BUILTIN_METHODS
from gemkd.experiments.run.train_knobs import TRAIN_KNOBS, train_space
from gemkd.experiments.spec.run_spec import PluginSpec, RunSpec, VariantSpec
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import TransferMethod
from gemkd.transfer.methods.space import Range, method_space, variant_space
from gemkd.transfer.plugins import check_init_args, instantiate, resolve_class

_PROTOCOL = ("a transfer method subclasses gemkd.transfer.methods.TransferMethod "
             "(docs/guides/custom_method.md)")


def method_class(spec: PluginSpec) -> type[TransferMethod]:
    return resolve_class(spec.class_path, "method", BUILTIN_METHODS, TransferMethod, _PROTOCOL)


def method_defaults(spec: RunSpec, m: PluginSpec) -> dict[str, Any]:
    """Spec-wide defaults a method's ``init_args`` start from: the spec keys its class declares
    in ``spec_defaults`` (KD's ``loss`` is the spec's ``kd_loss``), unless the variant sets them."""
    cls = method_class(m)
    keys = {f.name for f in dataclasses.fields(spec)}
    unknown = sorted(set(cls.spec_defaults.values()) - keys)
    if unknown:
        raise ConfigError(f"method {m.class_path!r}: spec_defaults names {unknown[0]!r}, which is "
                          "not a spec key")
    return {arg: getattr(spec, key) for arg, key in cls.spec_defaults.items()
            if arg not in m.init_args}


def _space(spec: RunSpec, variant: VariantSpec) -> dict[str, Range]:
    return variant_space(variant.name, [(m.class_path, method_class(m).tunable, m.init_args)
                                        for m in variant.methods], spec.tuning.knobs)


def search_space(spec: RunSpec, variant: VariantSpec) -> dict[str, Range]:
    """Knob → the range the search explores for ``variant`` (keys sorted): its methods' knobs
    and the student's training knobs (:func:`~gemkd.experiments.run.train_knobs.train_space`),
    checked: two methods tuning one knob, a method knob named as a training knob, a bad spec
    range, or a value the method's constructor rejects at a bound, the default or a listed
    choice (each with the other knobs at their defaults) is a ``ConfigError`` now, not minutes
    into the run."""
    space = _space(spec, variant)
    train = train_space(spec)
    clash = sorted(set(space) & set(TRAIN_KNOBS))
    if clash:
        raise ConfigError(f"variant {variant.name!r}: a method tunes {clash[0]!r}, which names "
                          "the student's own training knob: rename the method's argument")
    space = dict(sorted({**space, **train}.items()))
    for m in variant.methods:
        cls = method_class(m)
        base = {**method_defaults(spec, m), **m.init_args}
        own = method_space(m.class_path, cls.tunable, m.init_args, spec.tuning.knobs)
        centre = {k: r.center() for k, r in own.items()}
        for knob, rng in own.items():
            for value in rng.probe_values():
                try:
                    instantiate(cls, "method", (), {**base, **centre, knob: value})
                except ConfigError as e:
                    raise ConfigError(f"spec tuning.knobs: {knob}={value!r} ({rng.describe()}) for "
                                      f"method {m.class_path!r} of variant {variant.name!r}: "
                                      f"{e}") from None
    return space


def build_methods(spec: RunSpec, variant: VariantSpec, params: dict[str, Any]
                  ) -> list[TransferMethod]:
    """The variant's methods with their init_args plus the tuned ``params`` they take."""
    out = []
    for m in variant.methods:
        cls = method_class(m)
        args = {**method_defaults(spec, m), **m.init_args,
                **{k: v for k, v in params.items() if k in cls.tunable and k not in m.init_args}}
        method = instantiate(cls, "method", (), args)
        method.registered_name = m.class_path
        out.append(method)
    return out


def variant_needs(variant: VariantSpec) -> set[str]:
    return set().union(*(method_class(m).needs for m in variant.methods)) if variant.methods \
        else set()


def check_variant(spec: RunSpec, variant: VariantSpec) -> None:
    """Every method resolves, its init_args bind, what it requires another provides, the
    spec's tuning lists name knobs some method tunes, and its search space is sound
    (:func:`search_space`)."""
    provided: set[str] = set()
    classes = []
    for m in variant.methods:
        cls = method_class(m)
        check_init_args(cls, {**method_defaults(spec, m), **m.init_args}, "method")
        classes.append(cls)
        provided |= cls.provides
    for m, cls in zip(variant.methods, classes, strict=True):
        missing = sorted(cls.requires - provided)
        if missing:
            raise ConfigError(f"variant {variant.name!r}: method {m.class_path!r} requires "
                              f"{missing[0]!r}, which no method of the variant provides "
                              "(e.g. add kd)")
    for m, cls in zip(variant.methods, classes, strict=True):
        base = {**method_defaults(spec, m), **m.init_args}
        own = method_space(m.class_path, cls.tunable, m.init_args, spec.tuning.knobs)
        try:  # the fixed values as the runs will build them (a bad one fails now, not minutes in)
            instantiate(cls, "method", (), {**base, **{k: r.center() for k, r in own.items()}})
        except ConfigError as e:
            raise ConfigError(f"variant {variant.name!r}: method {m.class_path!r}: {e}") from None
    search_space(spec, variant)  # every bound and listed value, each built once
