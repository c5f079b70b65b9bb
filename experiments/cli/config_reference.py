"""The reference pages of the YAML configs, read off their dataclasses: every key with its type
(``Literal`` choices through ``typing.get_args``), its default (from a default instance, so a
section's own defaults show: ``hierarchical.config`` is ``domain_fm``) and its doc: the comment
on or above the field (``#: ...``, as Sphinx reads it), so the doc lives beside the field it
describes. Used by :mod:`gemkd.experiments.cli.reference`."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import textwrap
import tokenize
import types
import typing
from typing import Any, Literal


def field_docs(cls: type) -> dict[str, str]:
    """Field name → its doc: the comment lines right above it and the comment on its line,
    ``#:`` or ``#``, joined (``noqa`` and ``type:`` comments are not docs)."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = re.sub(r"^#:?\s?", "", tok.string).strip()
            if not re.match(r"(noqa|type:)", text):
                comments[tok.start[0]] = text
    lines = source.splitlines()
    (node,) = ast.parse(source).body
    if not isinstance(node, ast.ClassDef):
        raise TypeError(f"field_docs: {cls!r} is not a class")
    docs = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above: list[str] = []
        n = stmt.lineno - 1
        while n >= 1 and lines[n - 1].strip().startswith("#") and n in comments:
            above.insert(0, comments[n])
            n -= 1
        after = [comments[n] for n in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)
                 if n in comments]
        docs[stmt.target.id] = " ".join(part for part in above + after if part)
    return docs


def type_name(hint: Any) -> str:
    """A YAML reader's name for a field's type: ``one of `a`, `b` or null``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any"
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        named = " or ".join(type_name(a) for a in args if a is not type(None))
        return named + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict or hint is dict:
        return "mapping"
    if dataclasses.is_dataclass(hint):
        return "section"
    return getattr(hint, "__name__", str(hint))


def yaml_value(value: Any) -> str:
    """``value`` as it is written in YAML, in flow style."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    if callable(getattr(value, "to_dict", None)):  # a spec section (solaris.policy)
        return yaml_value(value.to_dict())
    return str(value)


def cell(text: str) -> str:
    """``text`` for a Markdown table cell: one line, ``|`` escaped, and outside code spans the
    characters Markdown would read as markup (``*``, ``<``) escaped."""
    text = " ".join(text.split()).replace("``", "`")
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = re.sub(r"([\\*<>])", r"\\\1", parts[i])
    return "`".join(parts).replace("|", "\\|")


def prose(doc: str | None) -> str:
    """A docstring as one paragraph of Markdown (reST roles and double backticks dropped)."""
    if not doc:
        return ""
    text = " ".join(inspect.cleandoc(doc).split())
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([\w]+)`", r"`\1`", text)
    return text.replace("``", "`")


def key_table(cls: type, instance: Any, prefix: str, links: dict[type, str] | None = None,
              anchors: dict[str, str] | None = None) -> list[str]:
    """The Markdown table of ``cls``'s keys; ``instance`` gives the defaults (None: the
    fields' own). A section-typed field links to ``anchors[name]``."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        doc = cell(docs.get(f.name, ""))
        hint = hints[f.name]
        kind = type_name(hint)
        if anchors and f.name in anchors:
            kind = f"section [`{prefix}{f.name}`](#{anchors[f.name]})"
            default = "see section"
        else:
            default = _default(f, instance)
        rows.append(f"| `{prefix}{f.name}` | {kind} | {default} | {doc} |")
    return rows


def _default(f: dataclasses.Field, instance: Any) -> str:
    if instance is not None:
        return f"`{yaml_value(getattr(instance, f.name))}`"
    if f.default is not dataclasses.MISSING:
        return f"`{yaml_value(f.default)}`"
    if f.default_factory is not dataclasses.MISSING:
        return f"`{yaml_value(f.default_factory())}`"
    return "required"


def undocumented(cls: type) -> list[str]:
    """The fields of ``cls`` with no doc comment."""
    docs = field_docs(cls)
    return [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
