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

#: (section, key) of every value that names a file or directory. ``always``: the value is a
#: path; otherwise it is a path only when it looks like one (a ``/`` or a ``.yaml`` suffix),
#: else the name of a shipped config (``small``, ``kuairand``).
PATH_KEYS: dict[tuple[str, str], bool] = {
    ("data", "src"): True,
    ("data", "preset"): False,
    ("data", "mapping"): False,
    ("teacher", "config"): False,
    ("teacher", "store"): True,
    ("teacher", "init_from"): True,
    ("hierarchical", "config"): False,
    ("hierarchical", "init_from"): True,
}
#: values that are words, not paths, where a key takes either
WORDS = {("hierarchical", "init_from"): {"gem"}, ("teacher", "init_from"): {"gem"}}


def looks_like_path(value: str) -> bool:
    return "/" in value or os.sep in value or value.endswith((".yaml", ".yml"))


def resolve_value(section: str, key: str, value: Any, base: Path) -> Any:
    """``value`` of ``section.key`` made absolute against ``base`` where it is a relative
    path (URIs such as ``s3://`` and absolute paths are kept)."""
    if not isinstance(value, str) or not value or value in WORDS.get((section, key), ()):
        return value
    if not PATH_KEYS[(section, key)] and not looks_like_path(value):
        return value
    if fs.is_remote(value) or os.path.isabs(value):
        return value
    return os.path.normpath(base / os.path.expanduser(value))


def resolve_paths(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """A spec mapping with every relative path of :data:`PATH_KEYS` resolved against ``base``
    (returns a new mapping; the sections are shallow-copied)."""
    out = dict(values)
    for (section, key) in PATH_KEYS:
        part = out.get(section)
        if isinstance(part, dict) and key in part:
            out[section] = {**part, key: resolve_value(section, key, part[key], base)}
    return out


def resolve_set(key: str, value: Any, base: Path) -> Any:
    """A ``--set section.key=value`` override's value, resolved against ``base`` (the working
    directory) when ``section.key`` names a path."""
    section, _, name = key.partition(".")
    if (section, name) in PATH_KEYS:
        return resolve_value(section, name, value, base)
    if not name and section in {s for s, _ in PATH_KEYS} and isinstance(value, dict):
        return resolve_paths({section: value}, base)[section]
    return value
