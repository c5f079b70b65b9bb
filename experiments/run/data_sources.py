"""Where a run's data comes from: one builder per ``data.source`` in a registry (as methods and
students are), each turning the spec's ``data:`` section into a :class:`DataPlan` — the data
step's cache key, its builder and, where the config alone tells them, the days, domains and tasks
the data will have (checked against the spec before any work)."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gemkd.experiments.run.cache import cached_step
from gemkd.experiments.spec.run_spec import RunSpec
from gemkd.experiments.teacher.teacher_config import EXPERIMENTS, find_config
from gemkd.transfer.config import build_dataclass, load_yaml
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.io import fs

#: the real logs a checkout ships (datasets/*/PROVENANCE.md), the sources' default ``src``; not
#: in the wheel (their licences are not the code's), so an installed gemkd needs ``data.src``
SHIPPED_DATA = EXPERIMENTS.parent / "datasets"
DEFAULT_MOVIELENS = SHIPPED_DATA / "movielens_latest_small"
DEFAULT_KUAIRAND = SHIPPED_DATA / "kuairand_pure_slice"
MAPPINGS = EXPERIMENTS / "data" / "mappings"


def _options(d, source: str, known: dict[str, Any]) -> dict[str, Any]:
    """The section's overrides (and preset), checked against ``known`` (name → default) of the
    source's own config."""
    extra = dict(d.overrides)
    if d.preset is not None:
        extra["preset"] = d.preset
    unknown = sorted(set(extra) - set(known))
    if unknown:
        key = unknown[0]
        where = "data.overrides" if key in d.overrides else "data"
        close = difflib.get_close_matches(key, list(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"spec {where}: unknown key {key!r} for source {source} (its keys: "
                          f"{', '.join(known) or 'none'}{hint})")
    return {k: extra.get(k, v) for k, v in known.items()}


@dataclass
class DataPlan:
    """The data step: its cache key, its builder ``make(out_dir)`` (None: a dataset used in
    place) and, where they follow from the config alone, the days and domains it will have."""

    key: dict
    make: Callable[[Path], Any] | None
    days: list[int] | None = None
    domains: list[str] | None = None
    path: Any = None  # the dataset itself, for source dataset
    tasks: list[str] | None = None  # where the config alone tells them


def _src(d, default: Path | None = None) -> Path:
    """The real data's ``src`` (resolved against the spec's folder when the spec was loaded),
    there — a missing one is named as such before any work."""
    src = Path(d.src) if d.src else default
    if src is None:
        raise ConfigError(f"spec data: source {d.source} needs src (the log file or directory)")
    if not d.src and not src.exists():
        raise ConfigError(f"spec data.src: not given, and its default {default} (the copy a "
                          "gemkd checkout ships in datasets/) is not here, as in a gemkd "
                          "installed without its repository: set data.src to the folder of "
                          f"the {d.source} files (e.g. --set data.src=DIR)")
    if not src.exists():
        raise ConfigError(f"spec data.src: {src} not found (a relative src is read from the "
                          "spec file's folder)")
    return src


def _synthetic(spec: RunSpec, world: int | None) -> DataPlan:
    """The synthetic world of a preset (``world``: its seed, one of ``data.seeds``)."""
    from gemkd.transfer.data.synth import SynthConfig, generate
    from gemkd.transfer.data.synth.generate import TASKS
    from gemkd.transfer.data.synth.world import domain_names

    d, source = spec.data, spec.data.source
    if d.src is not None:
        raise ConfigError("spec data.src: not used by source synthetic (use preset)")
    preset = d.preset or "small"
    values = load_yaml(find_config(preset, "data", spec.source_dir))
    values.update(d.overrides)
    if world is not None:
        values["seed"] = world
    cfg = build_dataclass(SynthConfig, values, source=f"spec data (preset {preset})")
    key = {"source": source, **dataclasses.asdict(cfg)}
    return DataPlan(key, lambda out: generate(cfg, out, overwrite=True),
                    list(range(cfg.n_days)), domain_names(cfg.n_domains), tasks=list(TASKS))


def _movielens(spec: RunSpec, world: int | None) -> DataPlan:
    """MovieLens-format ratings converted (``src``, default the shipped ml-latest-small)."""
    from gemkd.transfer.data.movielens import GENRE_GROUPS, convert_movielens, table_file

    d, source = spec.data, spec.data.source
    args = _options(d, source, {"n_days": 20, "max_history": 1024})
    src = _src(d, DEFAULT_MOVIELENS)
    key = {"source": source, "src": str(src.resolve()), **args}
    domains = list(GENRE_GROUPS) if src.is_dir() and table_file(src, "movies") else ["all"]
    return DataPlan(key, lambda out: convert_movielens(src, out, overwrite=True, **args),
                    list(range(args["n_days"])), domains, tasks=["click", "conversion"])


def _kuairand(spec: RunSpec, world: int | None) -> DataPlan:
    """KuaiRand logs converted with the shipped mapping (``src``, default the shipped slice)."""
    from gemkd.transfer.data.importer import load_mapping
    from gemkd.transfer.data.kuairand import DEFAULT_TASKS, convert_kuairand

    d, source = spec.data, spec.data.source
    args = _options(d, source, {"tasks": None, "min_domain_share": 0.01,
                                "max_history": 1024})
    src = _src(d, DEFAULT_KUAIRAND)
    mapping = load_mapping(MAPPINGS / "kuairand.yaml")
    key = {"source": source, "src": str(src.resolve()), **args}
    return DataPlan(key, lambda out: convert_kuairand(src, out, mapping, overwrite=True,
                                                      **args),
                    tasks=list(args["tasks"] or DEFAULT_TASKS))


def _import(spec: RunSpec, world: int | None) -> DataPlan:
    """Any log converted by a mapping (docs/guides/your_data.md)."""
    from gemkd.transfer.data.importer import import_logs, load_mapping

    d, source = spec.data, spec.data.source
    args = _options(d, source, {"mapping": None})
    if d.src is None or args["mapping"] is None:
        raise ConfigError("spec data: source import needs src (the log) and overrides.mapping "
                          "(its YAML mapping, docs/guides/your_data.md)")
    src = _src(d)
    mapping_path = find_config(args["mapping"], "data/mappings", spec.source_dir)
    mapping = load_mapping(mapping_path)
    key = {"source": source, "src": str(src.resolve()), "mapping": load_yaml(mapping_path)}
    return DataPlan(key, lambda out: import_logs(src, mapping, out, overwrite=True),
                    domains=None if mapping.domain is not None else ["all"],
                    tasks=[label.name for label in mapping.labels])


def _dataset(spec: RunSpec, world: int | None) -> DataPlan:
    """A gemkd dataset made before (a directory or an s3:// URI), read in place."""
    d = spec.data
    from gemkd.transfer.data.schema import DatasetSchema

    _options(d, "dataset", {})
    if d.src is None:
        raise ConfigError("spec data: source dataset needs src (a gemkd dataset directory or "
                          "s3:// URI)")
    where = fs.as_where(d.src) if fs.is_remote(d.src) else _src(d)
    schema = DatasetSchema.load(where)
    digest = hashlib.sha256(schema.to_json().encode()).hexdigest()[:16]
    key = {"source": "dataset", "src": fs.absolute(where), "schema": digest}
    return DataPlan(key, None, sorted(schema.days), list(schema.domains), path=where,
                    tasks=list(schema.tasks))


#: ``data.source`` → its plan builder
SOURCES: dict[str, Callable[[RunSpec, int | None], DataPlan]] = {
    "synthetic": _synthetic, "movielens": _movielens, "kuairand": _kuairand, "import": _import,
    "dataset": _dataset,
}


def data_plan(spec: RunSpec, world: int | None = None) -> DataPlan:
    """The data step's plan (``world``: the synthetic world's seed, one of ``data.seeds``); a
    bad ``data:`` section is a ConfigError here, before anything is written."""
    build = SOURCES.get(spec.data.source)
    if build is None:
        raise ConfigError(f"spec data.source {spec.data.source!r}: expected "
                          f"{', '.join(SOURCES)}")
    return build(spec, world)


def prepare_data(spec: RunSpec, cache: Path, log, world: int | None = None
                 ) -> tuple[Any, dict]:
    """Generate (synthetic) or convert (real data) the dataset; returns its location and cache
    key (a dataset of source ``dataset`` is used where it is)."""
    plan = data_plan(spec, world)
    make = plan.make
    if make is None:
        log(f"[data] {plan.path}")
        return plan.path, plan.key
    step = cached_step(cache, "data", plan.key, lambda out: make(out / "data"), log)
    return step / "data", plan.key
