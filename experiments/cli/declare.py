"""Every command-line option declared once, in one table row.

A command is a :class:`Command` (its words, its one-line summary, its :class:`Opt` rows and the
handler that runs it); :func:`add_commands` makes the argparse parser from those rows, and the
reference (``docs/reference/cli.md``, :mod:`gemkd.experiments.cli.reference`) is read off that
parser. An option's ``param`` names the library parameter it feeds, so :func:`arguments`
builds the library call from the parsed options and a test checks each option's default
against that parameter's own default (the two cannot drift apart unnoticed).

This module imports nothing heavy: ``gemkd --help`` must not load torch.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: ``Namespace`` attribute holding the :class:`Command` a parse selected
COMMAND = "_command"


@dataclass(frozen=True)
class Opt:
    """One option (``--n-days``) or positional argument (``data``) of a command.

    ``param`` is where the parsed value goes: ``None`` (the command's own logic reads it), a
    parameter name of the command's ``calls`` function, or ``"module:function.name"`` for
    another function (or a dataclass field: ``"module:Class.field"``). ``convert`` turns the
    parsed value into that argument (``"A:B"`` → a day range); the converted default must
    equal the parameter's default, unless ``own_default`` says why the command's differs."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: Sequence[str] | None = None
    required: bool = False
    flag: bool = False  # store_true: present or not
    many: bool = False  # repeatable (action="append"): a list, empty by default
    nargs: int | str | None = None
    metavar: str | tuple[str, ...] | None = None
    short: str | None = None  # a one-letter alias, e.g. "-v"
    positive: bool = False  # a count (threads, rows, days): 0 or less is an error
    param: str | None = None
    convert: Callable[[Any], Any] | None = None
    own_default: str | None = None

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    @property
    def positional(self) -> bool:
        return not self.name.startswith("-")

    @property
    def parser_default(self) -> Any:
        """The value argparse gives when the option is not on the command line."""
        return False if self.flag else [] if self.many else self.default

    def value(self, args: argparse.Namespace) -> Any:
        """The library argument this option stands for, from a parse."""
        raw = getattr(args, self.dest)
        return self.convert(raw) if self.convert is not None else raw

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        kw: dict[str, Any] = {"help": self.help}
        if self.flag:
            kw["action"] = "store_true"
        elif self.many:
            kw.update(action="append", default=[])
        else:
            kw["default"] = self.default
            for key in ("type", "nargs"):
                if getattr(self, key) is not None:
                    kw[key] = getattr(self, key)
            if self.choices is not None:
                kw["choices"] = list(self.choices)
        if self.metavar is not None:
            kw["metavar"] = self.metavar
        if self.positional:
            parser.add_argument(self.name, **kw)
            return
        if self.required:
            kw["required"] = True
        names = (self.short, self.name) if self.short else (self.name,)
        parser.add_argument(*names, **kw)


@dataclass(frozen=True)
class Command:
    """``words`` (``("data", "movielens")``) with its summary; ``run`` is None for a group of
    subcommands (``gemkd data``). ``calls`` is the library function (``"module:function"``)
    whose parameters the options' bare ``param`` names are."""

    words: tuple[str, ...]
    help: str
    options: tuple[Opt, ...] = ()
    run: Callable[[argparse.Namespace], None] | None = None
    calls: str | None = None

    @property
    def name(self) -> str:
        return " ".join(("gemkd", *self.words))

    def target(self, opt: Opt) -> tuple[str, str] | None:
        """``(function path, parameter)`` that ``opt`` feeds, or None."""
        if opt.param is None:
            return None
        if ":" in opt.param:
            function, _, param = opt.param.rpartition(".")
            return function, param
        if self.calls is None:
            raise ValueError(f"{self.name} {opt.name}: param {opt.param!r} needs the "
                             "command's calls (or a module:function.param)")
        return self.calls, opt.param


def resolve(path: str) -> Any:
    """``"module:attr.attr"`` → the object."""
    module, _, attrs = path.partition(":")
    obj: Any = importlib.import_module(module)
    for attr in attrs.split("."):
        obj = getattr(obj, attr)
    return obj


def arguments(args: argparse.Namespace, function: str | None = None) -> dict[str, Any]:
    """The keyword arguments of ``function`` (default: the command's ``calls``) that the
    parsed options feed, converted."""
    command: Command = getattr(args, COMMAND)
    function = function or command.calls
    out = {}
    for opt in command.options:
        target = command.target(opt)
        if target is not None and target[0] == function:
            out[target[1]] = opt.value(args)
    return out


def library_default(path: str, param: str) -> Any:
    """The default of ``param`` of the function (or dataclass) at ``path``;
    ``inspect.Parameter.empty`` when it has none."""
    return inspect.signature(resolve(path)).parameters[param].default


def add_commands(parser: argparse.ArgumentParser, commands: Iterable[Command]) -> None:
    """Add ``commands`` under ``parser`` (a group before its subcommands)."""
    parsers: dict[tuple[str, ...], argparse.ArgumentParser] = {(): parser}
    subs: dict[tuple[str, ...], Any] = {}
    for cmd in commands:
        parent = cmd.words[:-1]
        if parent not in subs:
            dest = f"{parent[-1]}_command" if parent else "command"
            subs[parent] = parsers[parent].add_subparsers(dest=dest, required=True)
        p = subs[parent].add_parser(cmd.words[-1], help=cmd.help,
                                    description=cmd.help[0].upper() + cmd.help[1:] + ".")
        for opt in cmd.options:
            opt.add_to(p)
        if cmd.run is not None:
            p.set_defaults(func=cmd.run, **{COMMAND: cmd})
        parsers[cmd.words] = p
