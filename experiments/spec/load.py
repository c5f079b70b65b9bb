"""Load a spec: one YAML file plus ``--set key=value`` overrides (``data.overrides.seed=7``)."""

from __future__ import annotations

import copy
import dataclasses
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gemkd.experiments.spec.paths import resolve_paths, resolve_set
from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.transfer.config import build_dataclass, load_yaml
from gemkd.transfer.errors import ConfigError

EXPERIMENTS = Path(__file__).resolve().parents[1]
DEFAULT_SPEC = EXPERIMENTS / "quickstart.yaml"


def split_item(item: str, what: str = "--set", form: str = "key=value") -> tuple[str, str]:
    """``"a.b=[1, 2]"`` → ``("a.b", "[1, 2]")``; no ``=`` or an empty key is a ConfigError
    naming the option ``what`` and the expected ``form``."""
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"{what} {item!r}: expected {form}")
    return key, value


def parse_set(items: Iterable[str], what: str = "--set", form: str = "key=value",
              as_yaml: bool = True) -> dict[str, Any]:
    """The one parser of ``key=value`` arguments: ``["tuning.trials=4", "seeds=[1,2,3]"]`` →
    ``{"tuning.trials": 4, "seeds": [1, 2, 3]}``, each value read as YAML (``as_yaml``; else
    kept as the string it is, which must not be empty). An error names the option ``what``, the
    item and the expected ``form``."""
    out = {}
    for item in items:
        key, value = split_item(item, what, form)
        if not as_yaml:
            if not value:
                raise ConfigError(f"{what} {item!r}: expected {form}")
            out[key] = value
            continue
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"{what} {item!r}: value is not valid YAML") from None
    return out


def apply_sets(values: dict[str, Any], sets: dict[str, Any], source: str) -> dict[str, Any]:
    """Apply dotted ``a.b.c`` / ``key`` overrides to a spec mapping, at any depth (e.g.
    ``student.init_args.embedding_dim``); missing sections are created, a non-mapping on the
    path is an error naming it."""
    values = copy.deepcopy(values)
    for key, value in sets.items():
        parts = key.split(".")
        if not all(parts):
            raise ConfigError(f"--set {key}: empty name in the dotted key")
        outer = values
        for depth, part in enumerate(parts[:-1]):
            outer = outer.setdefault(part, {})
            if not isinstance(outer, dict):
                where = ".".join(parts[:depth + 1])
                raise ConfigError(f"--set {key}: {where!r} in {source} is {outer!r}, not a "
                                  "mapping")
        outer[parts[-1]] = value
    return values


def spec_from_mapping(values: dict[str, Any], source: str = "spec") -> RunSpec:
    return build_dataclass(RunSpec, values, source=source)


def nest_open_keys(values: dict[str, Any]) -> dict[str, Any]:
    """A run's ``spec.yaml`` written before the sections were closed, as it reads now: each
    section's keys it does not declare moved under its open field (``overrides``, tuning's
    ``knobs``; the fields marked ``open``). A spec of this version is returned as it is."""
    out = dict(values)
    hints = typing.get_type_hints(RunSpec)
    for f in dataclasses.fields(RunSpec):
        cls, part = hints[f.name], out.get(f.name)
        if not (dataclasses.is_dataclass(cls) and isinstance(part, dict)):
            continue
        opened = [g.name for g in dataclasses.fields(cls) if g.metadata.get("open")]
        declared = {g.name for g in dataclasses.fields(cls)}
        loose = {k: v for k, v in part.items() if k not in declared}
        if opened and loose:
            kept = {k: v for k, v in part.items() if k in declared}
            out[f.name] = {**kept, opened[0]: {**kept.get(opened[0], {}), **loose}}
    return out


def load_spec(path: str | Path | None = None, sets: list[str] | None = None,
              written_by_run: bool = False) -> RunSpec:
    """Read a spec file, apply ``--set``-style overrides and validate keys and types.

    The deeper checks (against the data and the configs) are
    :func:`gemkd.experiments.run.preflight.check_spec`'s, run by ``run_experiment``.

    Parameters
    ----------
    path
        The spec YAML (None: the quickstart, experiments/quickstart.yaml). Relative paths in it
        resolve against its folder (:mod:`gemkd.experiments.spec.paths`).
    sets
        ``key=value`` overrides (dotted keys reach into sections, e.g. ``tuning.trials=4``); their
        relative paths resolve against the working directory.
    written_by_run
        ``path`` is a run's ``spec.yaml``, which an earlier version may have written with the
        sections' overrides inline (:func:`nest_open_keys`).

    Returns
    -------
    RunSpec
        The typed spec; ``source_dir`` is the file's folder.

    Raises
    ------
    ConfigError
        Naming the file and key: a missing or empty file, bad YAML, an unknown key, a wrong type
        or a broken rule.
    """
    path = Path(path) if path else DEFAULT_SPEC
    values = load_yaml(path)
    if written_by_run:
        values = nest_open_keys(values)
    if not values:  # an empty file is a mistake, not a request for every default
        raise ConfigError(f"{path}: the spec file is empty (no keys); name what to run, or "
                          f"leave out the SPEC argument to run the quickstart")
    overrides = {k: resolve_set(k, v, Path.cwd()) for k, v in parse_set(sets or []).items()}
    values = resolve_paths(values, path.resolve().parent)
    try:
        spec = spec_from_mapping(apply_sets(values, overrides, str(path)), source=str(path))
    except ConfigError:
        blame = _first_bad_set(values, overrides, sets or [], str(path))
        if blame is None:
            raise
        spec_from_mapping(apply_sets(values, dict([blame]), str(path)), source=f"--set "
                          f"{_item(sets or [], blame[0])}")
        raise  # not reached: the override alone fails as it did with the others
    spec.source_dir = path.resolve().parent  # relative config paths are looked up here too
    return spec


def _first_bad_set(values: dict[str, Any], overrides: dict[str, Any], sets: list[str],
                   source: str) -> tuple[str, Any] | None:
    """The first ``--set`` override that, applied alone to the spec file, fails to build
    (its error is then the override's, not the file's); None when the file alone fails too, or
    no override fails alone (several together do: the file's name stays on the error)."""
    try:
        spec_from_mapping(values, source=source)
    except ConfigError:
        return None
    for key, value in overrides.items():
        try:
            spec_from_mapping(apply_sets(values, {key: value}, source), source=source)
        except ConfigError:
            return key, value
    return None


def _item(sets: list[str], key: str) -> str:
    """The ``--set`` argument as the user wrote it for ``key``."""
    return next((item for item in sets if split_item(item)[0] == key), key)
