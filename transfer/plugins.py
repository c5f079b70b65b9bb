"""One plug-in mechanism for students, transfer methods and teachers: ``class_path`` +
``init_args`` (Lightning-CLI style, DESIGN §5.1).

A built-in name is shorthand for its import path; any other dotted path is imported, so a user's
class in the user's own package needs no change to gemkd. Mistakes become one-line
``ConfigError``\\ s naming the kind, the class and the argument, checked against the
constructor's signature before anything is built. A built-in name is registered beside its class
with :meth:`Registry.register` (torchdistill's pattern), in the package that defines the class;
``transfer`` holds the mechanism and the tables of its own kinds (transfer methods, speculation
policies), the model packages hold theirs (students, teachers).
"""

from __future__ import annotations

import importlib
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from gemkd.transfer.config import check_value
from gemkd.transfer.errors import ConfigError

_Class = TypeVar("_Class", bound=type)


class Registry(Mapping[str, str]):
    """The built-in names of one plug-in kind: name → the import path of the class registered
    under it (the table :func:`parse_plugin` and :func:`resolve_class` read). A class joins with
    ``@REGISTRY.register("name")`` above its definition, so the name sits beside the class; the
    package that defines the classes imports their modules, which fills the table."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._paths: dict[str, str] = {}

    def register(self, name: str) -> Callable[[_Class], _Class]:
        """A class decorator registering the class under ``name``; a name taken by another
        class is a ``ConfigError`` naming both."""
        def add(cls: _Class) -> _Class:
            path = f"{cls.__module__}.{cls.__qualname__}"
            known = self._paths.setdefault(name, path)
            if known != path:
                raise ConfigError(f"built-in {self.kind} name {name!r} is registered twice: "
                                  f"{known} and {path}")
            return cls
        return add

    def __getitem__(self, name: str) -> str:
        return self._paths[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self._paths!r})"


def parse_plugin(spec: Any, kind: str, builtins: Mapping[str, str]) -> tuple[str, dict]:
    """``"name"`` or ``{class_path, init_args}`` → ``(class_path, init_args)``, checked."""
    if isinstance(spec, str):
        spec = {"class_path": spec}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{kind}: expected a mapping with class_path and init_args, got "
                          f"{type(spec).__name__}")
    extra = sorted(set(spec) - {"class_path", "init_args"})
    if extra:
        raise ConfigError(f"{kind}: unknown key {extra[0]!r} (expected class_path, init_args)")
    class_path = spec.get("class_path")
    if not isinstance(class_path, str) or not class_path:
        raise ConfigError(f"{kind}.class_path must be a built-in name ({_names(builtins)}) or a "
                          f"dotted import path, got {class_path!r}")
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, Mapping) or not all(isinstance(k, str) for k in init_args):
        raise ConfigError(f"{kind}.init_args must be a mapping of argument names to values, "
                          f"got {init_args!r}")
    return class_path, dict(init_args)


def _names(builtins: Mapping[str, str]) -> str:
    return ", ".join(builtins) or "none"


def resolve_class(class_path: str, kind: str, builtins: Mapping[str, str],
                  base: type | None = None, protocol: str = "") -> type:
    """The class named by a built-in name or a dotted ``module.Class`` path; with ``base`` it
    must subclass it (``protocol`` then says what the kind must be)."""
    path = builtins.get(class_path, class_path)
    module_name, _, attr = path.rpartition(".")
    names = _names(builtins)
    if not module_name:
        raise ConfigError(
            f"unknown {kind} {class_path!r}: not a built-in ({names}) and could not be "
            f"imported (not a dotted import path such as my_pkg.module.MyClass)")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # a user's module may fail in any way; report it on one line
        why = " ".join(str(e).split())
        raise ConfigError(f"{kind} class_path {class_path!r} could not be imported "
                          f"({type(e).__name__}: {why}); built-in {kind}s: {names}") from e
    if not hasattr(module, attr):
        raise ConfigError(f"{kind} class_path {class_path!r} could not be imported: module "
                          f"{module_name!r} has no attribute {attr!r}; built-in {kind}s: {names}")
    cls = getattr(module, attr)
    if base is not None and not (isinstance(cls, type) and issubclass(cls, base)):
        what = "class" if isinstance(cls, type) else type(cls).__name__
        raise ConfigError(f"{kind} class_path {class_path!r} names {what} {attr!r}, not a "
                          f"{_public_name(base)} subclass; {protocol}")
    if not isinstance(cls, type):
        raise ConfigError(f"{kind} class_path {class_path!r} names a {type(cls).__name__}, not "
                          f"a class")
    return cls


def _public_name(cls: type) -> str:
    """``torch.nn.Module`` rather than ``torch.nn.modules.module.Module``."""
    module = "torch.nn" if cls.__module__.startswith("torch.nn.") else cls.__module__
    return f"{module}.{cls.__qualname__}"


def _hints(fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations: skip type checks rather than fail
        return {}


def init_parameters(cls: type, stop: tuple[type, ...] = (object,)
                    ) -> tuple[list[inspect.Parameter], dict[str, Any], bool]:
    """``(parameters, type hints, open)`` of ``cls.__init__``, following ``**kwargs`` up the MRO.

    Subclasses commonly forward ``**kwargs`` to a base class; the base's parameters are accepted
    arguments too. ``open`` is True when the chain ends in an unresolved ``**kwargs``.
    """
    params: dict[str, inspect.Parameter] = {}
    hints: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass in stop or klass is object:
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


def type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def check_init_args(cls: type, init_args: Mapping[str, Any], kind: str,
                    passed: tuple[str, ...] = (), stop: tuple[type, ...] = (object,)) -> None:
    """Raise a ``ConfigError`` naming ``kind``, ``cls`` and the argument when
    ``cls(*passed, **init_args)`` would not bind, or a value does not match its annotation.
    ``passed`` names what gemkd itself passes positionally (e.g. ``("schema", "tasks")``)."""
    name = cls.__name__
    params, hints, open_kwargs = init_parameters(cls, stop)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < len(passed):
        takes = ", ".join(p.name for p in params) or "no arguments"
        raise ConfigError(f"{name}: its constructor must accept ({', '.join(passed)}, "
                          f"**init_args); it takes {takes}")
    taken = {p.name for p in positional[:len(passed)]}
    accepted = [p for p in params if p.name not in taken and p.kind is not p.POSITIONAL_ONLY]
    names = {p.name for p in accepted}
    for key in init_args:
        if key in taken:
            raise ConfigError(f"{kind} {name}: init_args.{key} is passed by gemkd itself "
                              f"({', '.join(passed)}); remove it")
        if key not in names and not open_kwargs:
            raise ConfigError(f"{kind} {name}: unknown init_args.{key}; accepted: "
                              f"{', '.join(sorted(names)) or 'none'}")
    for p in accepted:
        if p.default is p.empty and p.name not in init_args:
            raise ConfigError(f"{kind} {name}: init_args.{p.name} is required")
    for key, value in init_args.items():
        hint = hints.get(key, inspect.Parameter.empty)
        if key not in names:
            continue
        try:
            check_value(value, hint, key)
        except ConfigError:
            raise ConfigError(f"{kind} {name}: init_args.{key} must be {type_name(hint)}, "
                              f"got {value!r}") from None


def instantiate(cls: type, kind: str, args: tuple, init_args: Mapping[str, Any]) -> Any:
    """``cls(*args, **init_args)``; a ``TypeError``/``ValueError`` from the constructor becomes
    one ``ConfigError`` line naming the class."""
    try:
        return cls(*args, **init_args)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        why = " ".join(str(e).split())
        raise ConfigError(f"{kind} {cls.__name__}: invalid init_args ({why})") from e
