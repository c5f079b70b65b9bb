"""Relative paths in a spec, resolved by one rule: a path is relative to where it was written —
the spec file's folder for a value in the file, the working directory for a ``--set`` value —
so a spec that names files beside it runs the same from any directory (docs/guides/experiments.md,
"Paths in a spec"). Resolved once, when the spec is loaded, so the run's ``spec.yaml`` records
absolute paths."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gemkd.transfer.io import fs

#: the key path (section, ..., key) of every value that names a file or directory. ``always``:
#: the value is a path; otherwise it is a path only when it looks like one (a ``/`` or a
#: ``.yaml`` suffix), else the name of a shipped config (``small``, ``kuairand``).
PATH_KEYS: dict[tuple[str, ...], bool] = {
    ("data", "src"): True,
    ("data", "preset"): False,
    ("data", "overrides", "mapping"): False,
    ("teacher", "config"): False,
    ("teacher", "store"): True,
    ("teacher", "overrides", "init_from"): True,
    ("hierarchical", "config"): False,
    ("hierarchical", "overrides", "init_from"): True,
}
#: values that are words, not paths, where a key takes either
WORDS: dict[tuple[str, ...], set[str]] = {("hierarchical", "overrides", "init_from"): {"gem"},
         ("teacher", "overrides", "init_from"): {"gem"}}


def looks_like_path(value: str) -> bool:
    return "/" in value or os.sep in value or value.endswith((".yaml", ".yml"))


def resolve_value(where: tuple[str, ...], value: Any, base: Path) -> Any:
    """``value`` at the key path ``where`` made absolute against ``base`` where it is a
    relative path (URIs such as ``s3://`` and absolute paths are kept)."""
    if not isinstance(value, str) or not value or value in WORDS.get(where, ()):
        return value
    if not PATH_KEYS[where] and not looks_like_path(value):
        return value
    if fs.is_remote(value) or os.path.isabs(value):
        return value
    return os.path.normpath(base / os.path.expanduser(value))


def resolve_paths(values: dict[str, Any], base: Path, above: tuple[str, ...] = ()
                  ) -> dict[str, Any]:
    """A spec mapping (the part of it at the key path ``above``) with every relative path of
    :data:`PATH_KEYS` resolved against ``base`` (returns a new mapping; the mappings on a
    path's way are copied)."""
    out = dict(values)
    for where in PATH_KEYS:
        if where[:len(above)] != above:
            continue
        _resolve_at(out, where, len(above), base)
    return out


def _resolve_at(out: dict[str, Any], where: tuple[str, ...], depth: int, base: Path) -> None:
    key = where[depth]
    if key not in out:
        return
    if depth == len(where) - 1:
        out[key] = resolve_value(where, out[key], base)
    elif isinstance(out[key], dict):
        out[key] = dict(out[key])
        _resolve_at(out[key], where, depth + 1, base)


def resolve_set(key: str, value: Any, base: Path) -> Any:
    """A ``--set section.key=value`` override's value, resolved against ``base`` (the working
    directory) when ``section.key`` names a path (or, a mapping, holds one)."""
    where = tuple(key.split("."))
    if where in PATH_KEYS:
        return resolve_value(where, value, base)
    if isinstance(value, dict) and any(p[:len(where)] == where for p in PATH_KEYS):
        return resolve_paths(value, base, where)
    return value
