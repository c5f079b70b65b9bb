"""Constraints declared beside the fields they constrain, read by one validator.

A config or spec field carries its rules in its annotation, ``batch_size: Annotated[int,
Rule(...)]`` (usually through a module's alias, ``batch_size: AtLeast1 = 512``), so a key's
type, default, documentation and rule sit on one line; the class's ``__post_init__`` calls
:func:`check_fields` and keeps only what relates several fields. ``typing.get_type_hints``
without ``include_extras`` drops the rules, so the type checks of
:func:`gemkd.transfer.config.check_value` and the generated reference pages see the plain type.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Rule:
    """One constraint on a field's value.

    Parameters
    ----------
    ok
        True when the value is valid. A null value of an optional field is never tested.
    message
        The error when it is not, a ``str.format`` template of ``key`` (the field's name),
        ``value`` and ``obj`` (the instance, for a message that names another field).
    """

    ok: Callable[[Any], bool]
    message: str


def is_int(value: Any) -> bool:
    """An int that is not a bool (YAML's true is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def at_least(low: float, message: str) -> Rule:
    """A number ``>= low``; ``message`` as :class:`Rule`'s."""
    return Rule(lambda v: v >= low, message)


def int_at_least(low: int, message: str) -> Rule:
    """An integer (not a bool) ``>= low``; ``message`` as :class:`Rule`'s."""
    return Rule(lambda v: is_int(v) and v >= low, message)


def one_of(choices: Sequence[Any], message: str) -> Rule:
    """A value among ``choices``; ``message`` as :class:`Rule`'s. A ``Literal`` field needs
    none: its rule is derived from the type (:func:`literal_rule`)."""
    return Rule(lambda v: v in choices, message)


@cache
def literal_rule(kind: Any) -> Rule:
    """The rule of a ``Literal`` type, read from it (``typing.get_args``), so its choices are
    written once, as the type: an instance built without the YAML validator (which checks the
    type itself) is refused with the key, the choices and the value."""
    values = typing.get_args(kind)
    listed = ", ".join(str(v) for v in values).replace("{", "{{").replace("}", "}}")
    return Rule(lambda v: v in values, f"{{key}} must be one of {listed}, got {{value!r}}")


def half_open(message: str, first: int | None = None) -> Rule:
    """A day range ``[first, end)`` given as two numbers with ``first < end`` (and ``first >=``
    the given lower bound); ``message`` as :class:`Rule`'s."""
    return Rule(lambda v: len(v) == 2 and v[0] < v[1] and (first is None or v[0] >= first),
                message)


def unique(message: str, nonempty: bool = True) -> Rule:
    """A list whose items appear once (and that has at least one, with ``nonempty``)."""
    return Rule(lambda v: (bool(v) or not nonempty) and len(set(v)) == len(v), message)


def _rules_of(hint: Any) -> tuple[Rule, ...]:
    """The rules of a hint: a ``Literal``'s own (:func:`literal_rule`), then an ``Annotated``
    hint's, or those of the arms of an optional one."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return (literal_rule(hint),)
    if origin is typing.Annotated:
        return _rules_of(hint.__origin__) + tuple(m for m in hint.__metadata__
                                                  if isinstance(m, Rule))
    if origin in (typing.Union, types.UnionType):
        return tuple(r for arm in typing.get_args(hint) for r in _rules_of(arm))
    return ()


@cache
def field_rules(cls: type) -> tuple[tuple[str, tuple[Rule, ...]], ...]:
    """Each field of the dataclass ``cls`` that has rules, with them, in declaration order.

    Raises
    ------
    TypeError
        If ``cls`` is not a dataclass.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"field_rules: {cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls, include_extras=True)
    found = ((f.name, _rules_of(hints[f.name])) for f in dataclasses.fields(cls))
    return tuple((name, rules) for name, rules in found if rules)


def field_problems(obj: Any) -> list[str]:
    """The message of every broken rule of ``obj``'s fields (the first broken rule per field,
    each message once), in declaration order; empty when all hold."""
    problems: list[str] = []
    cls: type = type(obj)
    for name, rules in field_rules(cls):
        value = getattr(obj, name)
        if value is None:
            continue
        for rule in rules:
            try:
                ok = rule.ok(value)
            except (TypeError, ValueError):  # e.g. a string where a number belongs
                ok = False
            if not ok:
                text = rule.message.format(key=name, value=value, obj=obj)
                if text not in problems:
                    problems.append(text)
                break
    return problems


def check_fields(obj: Any) -> None:
    """Check every field rule of the dataclass instance ``obj``.

    Raises
    ------
    ValueError
        Naming each broken rule, joined by "; " (``build_dataclass`` adds the source).
    """
    problems = field_problems(obj)
    if problems:
        raise ValueError("; ".join(problems))
