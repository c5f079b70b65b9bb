"""Build a student from ``{"class_path": ..., "init_args": {...}}`` (Lightning-CLI style).

One mechanism for built-ins and plug-ins: a built-in name is shorthand for its import path, and
any other dotted path is imported, so a user's student in the user's own package needs no change
to gemkd (DESIGN §1). Config mistakes become one-line ``ConfigError``s that name the class and
the argument, checked against the constructor's signature before anything is built.
"""

from __future__ import annotations

import collections.abc
import importlib
import inspect
import types
import typing
from collections.abc import Mapping
from typing import Any

from torch import nn

from transfer.data.schema import DatasetSchema
from transfer.errors import ConfigError

BUILTIN_STUDENTS: dict[str, str] = {
    "mlp": "students.mlp.MLPStudent",
    "dcn": "students.dcn.DCNStudent",
    "seq_pool": "students.seq_pool.SeqPoolStudent",
}

_PROTOCOL = "a student is a torch.nn.Module whose forward(batch, features=None) returns " \
            "StudentOutput"


def _builtins() -> str:
    return ", ".join(BUILTIN_STUDENTS)


def resolve_student_class(class_path: str) -> type[nn.Module]:
    """The class named by a built-in name or a dotted ``module.Class`` path."""
    path = BUILTIN_STUDENTS.get(class_path, class_path)
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise ConfigError(
            f"unknown student {class_path!r}: not a built-in ({_builtins()}) and could not be "
            "imported (not a dotted import path such as my_students.tower.TwoTower)"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # a user's module may fail in any way; report it on one line
        why = " ".join(str(e).split())
        raise ConfigError(
            f"student class_path {class_path!r} could not be imported "
            f"({type(e).__name__}: {why}); built-in students: {_builtins()}"
        ) from e
    if not hasattr(module, attr):
        raise ConfigError(
            f"student class_path {class_path!r} could not be imported: module {module_name!r} "
            f"has no attribute {attr!r}; built-in students: {_builtins()}"
        )
    cls = getattr(module, attr)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        kind = "class" if isinstance(cls, type) else type(cls).__name__
        raise ConfigError(
            f"student class_path {class_path!r} names {kind} {attr!r}, not a "
            f"torch.nn.Module subclass; {_PROTOCOL}"
        )
    return cls


def _hints(fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations: skip type checks rather than fail
        return {}


def init_parameters(cls: type) -> tuple[list[inspect.Parameter], dict[str, Any], bool]:
    """``(parameters, type hints, open)`` of ``cls.__init__``, following ``**kwargs`` up the MRO.

    Students commonly forward ``**kwargs`` to a base class; the base's parameters are accepted
    arguments too. ``open`` is True when the chain ends in an unresolved ``**kwargs``.
    """
    params: dict[str, inspect.Parameter] = {}
    hints: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            break
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        sig_params = list(inspect.signature(init).parameters.values())[1:]  # drop self
        var_kw = any(p.kind is p.VAR_KEYWORD for p in sig_params)
        for name, hint in _hints(init).items():
            hints.setdefault(name, hint)
        for p in sig_params:
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                params.setdefault(p.name, p)
        if not var_kw:
            return list(params.values()), hints, False
    return list(params.values()), hints, True


def _type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _matches(value: Any, hint: Any) -> bool:
    """A shallow check of JSON/YAML-like values against common annotations; unknown → True."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, list | tuple):
            return False
        item = args[0] if args and origin is not tuple else Any
        return all(_matches(v, item) for v in value)
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, Mapping):
            return False
        kt, vt = args if len(args) == 2 else (Any, Any)
        return all(_matches(k, kt) and _matches(v, vt) for k, v in value.items())
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def check_init_args(cls: type, init_args: Mapping[str, Any]) -> None:
    """Raise a ``ConfigError`` naming ``cls`` and the argument when ``cls(schema, tasks,
    **init_args)`` would not bind, or a value does not match its annotation."""
    name = cls.__name__
    params, hints, open_kwargs = init_parameters(cls)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2:
        raise ConfigError(f"student {name}: its constructor must accept (schema, tasks, "
                          "**init_args); it takes " + (", ".join(p.name for p in params) or
                                                        "no arguments"))
    taken = {positional[0].name, positional[1].name}
    accepted = [p for p in params if p.name not in taken and p.kind is not p.POSITIONAL_ONLY]
    names = {p.name for p in accepted}
    for key in init_args:
        if key in taken:
            raise ConfigError(f"student {name}: init_args.{key} is passed by gemkd itself "
                              "(the dataset schema and the task list); remove it")
        if key not in names and not open_kwargs:
            raise ConfigError(
                f"student {name}: unknown init_args.{key}; accepted: "
                f"{', '.join(sorted(names)) or 'none'}"
            )
    for p in accepted:
        if p.default is p.empty and p.name not in init_args:
            raise ConfigError(f"student {name}: init_args.{p.name} is required")
    for key, value in init_args.items():
        hint = hints.get(key, inspect.Parameter.empty)
        if key in names and not _matches(value, hint):
            raise ConfigError(f"student {name}: init_args.{key} must be {_type_name(hint)}, "
                              f"got {value!r}")


def build_student(
    spec: Mapping[str, Any] | str, schema: DatasetSchema, tasks: list[str] | None
) -> nn.Module:
    """Instantiate ``cls(schema, tasks, **init_args)`` from a ``{class_path, init_args}`` spec
    (a bare string is a ``class_path`` with no ``init_args``)."""
    if isinstance(spec, str):
        spec = {"class_path": spec}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"student: expected a mapping with class_path and init_args, got "
                          f"{type(spec).__name__}")
    extra = sorted(set(spec) - {"class_path", "init_args"})
    if extra:
        raise ConfigError(f"student: unknown key {extra[0]!r} (expected class_path, init_args)")
    class_path = spec.get("class_path")
    if not isinstance(class_path, str) or not class_path:
        raise ConfigError(f"student.class_path must be a built-in name ({_builtins()}) or a "
                          f"dotted import path, got {class_path!r}")
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, Mapping) or not all(isinstance(k, str) for k in init_args):
        raise ConfigError(f"student.init_args must be a mapping of argument names to values, "
                          f"got {init_args!r}")
    cls = resolve_student_class(class_path)
    check_init_args(cls, init_args)
    try:
        model = cls(schema, tasks, **init_args)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        why = " ".join(str(e).split())
        raise ConfigError(f"student {cls.__name__}: invalid init_args ({why})") from e
    if not isinstance(model, nn.Module):  # e.g. a __new__ returning something else
        raise ConfigError(f"student {cls.__name__} built a {type(model).__name__}; {_PROTOCOL}")
    return model
