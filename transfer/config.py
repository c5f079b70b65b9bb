"""Flat YAML configs mapped onto dataclasses, with errors that name the file and the key.

"The config is the API": every knob is a dataclass field with a default and a docstring (the
generated pages in docs/reference/); an unknown key or a value of the wrong type is rejected
before any work starts.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import inspect
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gemkd.transfer.errors import ConfigError

T = TypeVar("T")


def load_yaml(path: str | Path, loader: type[yaml.SafeLoader] = yaml.SafeLoader
              ) -> dict[str, Any]:
    """Read a YAML mapping; a missing file, bad YAML, or a non-mapping is a ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        raw = yaml.load(path.read_text(), Loader=loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {getattr(e, 'problem', e)}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys to values, got {type(raw).__name__}")
    return raw


def build_dataclass(cls: type[T], values: dict[str, Any], source: str = "config") -> T:
    """Instantiate ``cls`` from a mapping, checking keys and types strictly; a field whose type
    is a dataclass is built from a nested mapping the same way (or by the class's
    ``from_mapping(values, source)`` when it has one: a section with open keys)."""
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected a mapping, got {values!r}")
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"{source}: {unknown_key(unknown[0], known.values())}")
    hints = typing.get_type_hints(cls)
    checked = {}
    for key, value in values.items():
        checked[key] = check_value(value, hints[key], f"{source}: key {key!r}")
    try:
        return cls(**checked)
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None


def unknown_key(key: str, known: collections.abc.Iterable[dataclasses.Field]) -> str:
    """What an unknown ``key`` among the fields ``known`` is: the valid keys, the closest one
    (did you mean), and where a field marked ``metadata={"open": "..."}`` takes keys of another
    config, that it goes there."""
    known = list(known)
    names = sorted(f.name for f in known)
    text = f"unknown key {key!r}; valid keys: {', '.join(names)}"
    close = difflib.get_close_matches(key, names, n=1)
    if close:
        return f"{text} (did you mean {close[0]!r}?)"
    opened = [f for f in known if f.metadata.get("open")]
    if opened:
        return f"{text} ({opened[0].metadata['open']} goes under {opened[0].name!r})"
    return text


def check_value(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against the annotation ``hint`` (and ints turned into floats where a
    float is expected); a mismatch is a ConfigError naming ``where``. The one type checker of
    configs, specs and plug-in ``init_args``; unknown annotations pass."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return check_value(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: got {value!r}")
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            raise ConfigError(f"{where}: expected one of {list(typing.get_args(hint))}, got "
                              f"{value!r}")
        return value
    if origin in (list, tuple, collections.abc.Sequence):
        args = typing.get_args(hint)
        item = args[0] if args and origin is not tuple else Any
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [check_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return value
    if hint is Any or hint is inspect.Parameter.empty:
        return value
    if hint is type(None):
        if value is not None:
            raise ConfigError(f"{where}: expected null, got {value!r}")
        return value
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if isinstance(value, hint):
            return value
        build = getattr(hint, "from_mapping", None)
        if build is not None:
            return build(value, where)
        return build_dataclass(hint, value, where)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if isinstance(hint, type) and not isinstance(value, hint):
        raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")
    return value


def load_dataclass(cls: type[T], path: str | Path, overrides: dict[str, Any] | None = None) -> T:
    """``build_dataclass`` on a YAML file, with optional key overrides (e.g. ``--seed``)."""
    values = load_yaml(path)
    values.update(overrides or {})
    return build_dataclass(cls, values, source=str(path))
