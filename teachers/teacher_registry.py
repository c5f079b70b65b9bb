"""Teachers by name or import path (DESIGN §5.1): a teacher config's ``class_path``.

A teacher is any ``nn.Module`` built as ``cls(schema, **model)`` (or ``cls.from_config(schema,
model)``) whose ``forward(batch)`` returns a :class:`~gemkd.transfer.models.TeacherOutput` and whose
``representation_dims()`` names what an export may store (docs/guides/custom_teacher.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.models import optional_hook
from gemkd.transfer.plugins import Registry, check_init_args, instantiate, resolve_class

#: The built-in teachers' names, each registered beside its class (``@BUILTIN_TEACHERS.register``);
#: ``gemkd.teachers`` imports their modules, which fills it.
BUILTIN_TEACHERS = Registry("teacher")
_PROTOCOL = ("a teacher is a torch.nn.Module whose forward(batch) returns TeacherOutput and "
             "which has representation_dims()")


def resolve_teacher_class(class_path: str) -> type[nn.Module]:
    return resolve_class(class_path, "teacher", BUILTIN_TEACHERS, nn.Module, _PROTOCOL)


def build_teacher(class_path: str, schema: DatasetSchema, model: Mapping[str, Any]) -> nn.Module:
    """``cls.from_config(schema, model)`` when the class has it (the built-ins check their own
    keys), else ``cls(schema, **model)`` checked against its signature."""
    cls = resolve_teacher_class(class_path)
    from_config = optional_hook(cls, "from_config")
    if from_config is not None:
        built = from_config(schema, dict(model))
    else:
        check_init_args(cls, model, "teacher", ("schema",), stop=(nn.Module,))
        built = instantiate(cls, "teacher", (schema,), model)
    if not callable(getattr(built, "representation_dims", None)):
        raise ConfigError(f"teacher {cls.__name__} has no representation_dims(); {_PROTOCOL}")
    return built
