"""A variant's transfer methods: resolved from the spec, their tuning grid, built per run.

Methods are named by a built-in name (``adapters.methods.BUILTIN_METHODS``) or an import path
(DESIGN §5.1). A method's knobs are its ``__init__`` arguments; those listed in its ``tunable``
are tried from the spec's ``tuning:`` list for that knob (else the method's default list),
unless the variant fixes them in ``init_args``. Every variant gets the same rule: the product of
its methods' lists, chosen on the validation day.
"""

from __future__ import annotations

import itertools
from typing import Any

from adapters.methods import BUILTIN_METHODS
from experiments.spec.model import PluginSpec, RunSpec, VariantSpec
from transfer.errors import ConfigError
from transfer.methods import TransferMethod
from transfer.plugins import check_init_args, instantiate, resolve_class

_PROTOCOL = "a transfer method subclasses transfer.methods.TransferMethod (docs/custom_method.md)"


def method_class(spec: PluginSpec) -> type[TransferMethod]:
    return resolve_class(spec.class_path, "method", BUILTIN_METHODS, TransferMethod, _PROTOCOL)


def method_defaults(spec: RunSpec, m: PluginSpec) -> dict[str, Any]:
    """Spec-wide defaults a method's ``init_args`` start from: the KD loss (``kd_loss``)."""
    cls = method_class(m)
    return {"loss": spec.kd_loss} if cls.__name__ == "KD" and "loss" not in m.init_args else {}


def tunable_lists(spec: RunSpec, variant: VariantSpec) -> dict[str, list[Any]]:
    """Knob → values to try for ``variant`` (its methods' tunables not fixed by init_args)."""
    lists: dict[str, list[Any]] = {}
    owner: dict[str, str] = {}
    for m in variant.methods:
        cls = method_class(m)
        for knob, default in cls.tunable.items():
            if knob in m.init_args:
                continue
            if knob in owner:
                raise ConfigError(f"variant {variant.name!r}: methods {owner[knob]!r} and "
                                  f"{m.class_path!r} both tune {knob!r}")
            owner[knob] = m.class_path
            lists[knob] = list(spec.tuning.knobs.get(knob, default))
    return lists


def grid(spec: RunSpec, variant: VariantSpec) -> list[dict[str, Any]]:
    """Every combination of the variant's knob values (keys sorted: a stable order)."""
    lists = tunable_lists(spec, variant)
    keys = sorted(lists)
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(lists[k] for k in keys))]


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
    """Every method resolves, its init_args bind, what it requires another provides, and the
    spec's tuning lists name knobs some method tunes."""
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
    lists = tunable_lists(spec, variant)
    for m, cls in zip(variant.methods, classes, strict=True):
        base = {**method_defaults(spec, m), **m.init_args}
        try:  # the fixed values as the runs will build them (a bad one fails now, not minutes in)
            instantiate(cls, "method", (), {**base, **{k: v[0] for k, v in lists.items()
                                                       if k in cls.tunable}})
        except ConfigError as e:
            raise ConfigError(f"variant {variant.name!r}: method {m.class_path!r}: {e}") from None
        for knob in cls.tunable:
            for value in lists.get(knob, []):  # an out-of-range value fails now, not minutes in
                try:
                    instantiate(cls, "method", (), {**base, knob: value})
                except ConfigError as e:
                    raise ConfigError(f"spec tuning: {knob}={value!r} for method "
                                      f"{m.class_path!r} of variant {variant.name!r}: {e}"
                                      ) from None
