"""Build a student from ``{"class_path": ..., "init_args": {...}}`` (DESIGN §1, §5.1).

The mechanism is :mod:`gemkd.transfer.plugins` (shared with transfer methods and teachers); this
module holds the table of built-in names (each registered beside its class) and the student's
constructor contract ``cls(schema, tasks, **args)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.plugins import Registry, instantiate, parse_plugin, resolve_class
from gemkd.transfer.plugins import check_init_args as _check

#: The built-in students' names, each registered beside its class (``@BUILTIN_STUDENTS.register``);
#: ``gemkd.students`` imports their modules, which fills it.
BUILTIN_STUDENTS = Registry("student")
PASSED = ("schema", "tasks")
_PROTOCOL = "a student is a torch.nn.Module whose forward(batch, features=None) returns " \
            "StudentOutput"


def resolve_student_class(class_path: str) -> type[nn.Module]:
    """The class named by a built-in name or a dotted ``module.Class`` path."""
    return resolve_class(class_path, "student", BUILTIN_STUDENTS, nn.Module, _PROTOCOL)


def check_init_args(cls: type, init_args: Mapping[str, Any]) -> None:
    """A ``ConfigError`` naming the student and the argument when ``cls(schema, tasks,
    **init_args)`` would not bind, or a value does not match its annotation."""
    _check(cls, init_args, "student", PASSED, stop=(nn.Module,))


def build_student(
    spec: Mapping[str, Any] | str, schema: DatasetSchema, tasks: list[str] | None
) -> nn.Module:
    """Build a student from its ``{class_path, init_args}`` spec: ``cls(schema, tasks,
    **init_args)``.

    Parameters
    ----------
    spec
        A built-in name (``mlp``, ``dcn``, ``seq_pool``) or an import path, alone or as
        ``{class_path, init_args}``.
    schema
        The dataset's schema.
    tasks
        The tasks the student predicts (None: the schema's, for the built-in students).

    Returns
    -------
    torch.nn.Module
        The student.

    Raises
    ------
    ConfigError
        An unknown class, an ``init_args`` key its constructor does not take, or a class that
        does not build a module.
    """
    class_path, init_args = parse_plugin(spec, "student", BUILTIN_STUDENTS)
    cls = resolve_student_class(class_path)
    check_init_args(cls, init_args)
    model = instantiate(cls, "student", (schema, tasks), init_args)
    if not isinstance(model, nn.Module):  # e.g. a __new__ returning something else
        raise ConfigError(f"student {cls.__name__} built a {type(model).__name__}; {_PROTOCOL}")
    return model
