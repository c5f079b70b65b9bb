"""The cached steps of ``gemkd run``: data, teacher fit, teacher export, LoopFM codes."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gemkd.experiments.run.cache import cached_step, plugin_key
from gemkd.experiments.spec.model import RunSpec, TeacherSpec
from gemkd.experiments.teacher_config import (
    EXPERIMENTS,
    TeacherTrainConfig,
    find_config,
)
from gemkd.transfer.config import build_dataclass, load_yaml
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.io import fs

SHARED_DATA = EXPERIMENTS.parents[1] / "shared" / "data"
DEFAULT_MOVIELENS = SHARED_DATA / "movielens_latest_small"
DEFAULT_KUAIRAND = SHARED_DATA / "kuairand_pure_slice"
MAPPINGS = EXPERIMENTS / "data" / "mappings"


def _options(d, source: str, known: dict[str, Any]) -> dict[str, Any]:
    """The section's extra keys, checked against ``known`` (name → default)."""
    extra = dict(d.overrides)
    if d.preset is not None:
        extra["preset"] = d.preset
    unknown = sorted(set(extra) - set(known))
    if unknown:
        raise ConfigError(f"spec data: unknown key {unknown[0]!r} for source {source} (keys: "
                          f"src, {', '.join(known)})")
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
    if d.src is None and default is None:
        raise ConfigError(f"spec data: source {d.source} needs src (the log file or directory)")
    src = Path(d.src) if d.src else default
    if not src.exists():
        what = "src" if d.src else f"src (default {default})"
        raise ConfigError(f"spec data.{what}: {src} not found (a relative src is read from "
                          "the spec file's folder)")
    return src


def data_plan(spec: RunSpec, world: int | None = None) -> DataPlan:
    """The data step's plan (``world``: the synthetic world's seed, one of ``data.seeds``); a
    bad ``data:`` section is a ConfigError here, before anything is written."""
    d, source = spec.data, spec.data.source
    if source == "synthetic":
        from gemkd.transfer.data.synth import SynthConfig, generate
        from gemkd.transfer.data.synth.generate import TASKS
        from gemkd.transfer.data.synth.world import domain_names

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
    if source == "movielens":
        from gemkd.transfer.data.movielens import GENRE_GROUPS, convert_movielens

        args = _options(d, source, {"n_days": 20, "max_history": 1024})
        src = _src(d, DEFAULT_MOVIELENS)
        key = {"source": source, "src": str(src.resolve()), **args}
        domains = list(GENRE_GROUPS) if (src / "movies.csv").is_file() else ["all"]
        return DataPlan(key, lambda out: convert_movielens(src, out, overwrite=True, **args),
                        list(range(args["n_days"])), domains, tasks=["click", "conversion"])
    if source == "kuairand":
        from gemkd.transfer.data.importer import load_mapping
        from gemkd.transfer.data.kuairand import DEFAULT_TASKS, convert_kuairand

        args = _options(d, source, {"tasks": None, "min_domain_share": 0.01,
                                    "max_history": 1024})
        src = _src(d, DEFAULT_KUAIRAND)
        mapping = load_mapping(MAPPINGS / "kuairand.yaml")
        key = {"source": source, "src": str(src.resolve()), **args}
        return DataPlan(key, lambda out: convert_kuairand(src, out, mapping, overwrite=True,
                                                          **args),
                        tasks=list(args["tasks"] or DEFAULT_TASKS))
    if source == "import":
        from gemkd.transfer.data.importer import import_logs, load_mapping

        args = _options(d, source, {"mapping": None})
        if d.src is None or args["mapping"] is None:
            raise ConfigError("spec data: source import needs src (the log) and mapping (its "
                              "YAML mapping, docs/your_data.md)")
        src = _src(d)
        mapping_path = find_config(args["mapping"], "data/mappings", spec.source_dir)
        mapping = load_mapping(mapping_path)
        key = {"source": source, "src": str(src.resolve()), "mapping": load_yaml(mapping_path)}
        return DataPlan(key, lambda out: import_logs(src, mapping, out, overwrite=True),
                        domains=None if mapping.domain is not None else ["all"],
                        tasks=[label.name for label in mapping.labels])
    if source == "dataset":
        return _existing_dataset(d)
    raise ConfigError(f"spec data.source {source!r}: expected synthetic, movielens, kuairand, "
                      "import or dataset")


def _existing_dataset(d) -> DataPlan:
    """A gemkd dataset made before (a directory or an s3:// URI), read in place."""
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


def prepare_data(spec: RunSpec, cache: Path, log, world: int | None = None
                 ) -> tuple[Any, dict]:
    """Generate (synthetic) or convert (real data) the dataset; returns its location and cache
    key (a dataset of source ``dataset`` is used where it is)."""
    plan = data_plan(spec, world)
    if plan.make is None:
        log(f"[data] {plan.path}")
        return plan.path, plan.key
    step = cached_step(cache, "data", plan.key, lambda out: plan.make(out / "data"), log)
    return step / "data", plan.key


def teacher_config(spec: RunSpec, lag: int, which: TeacherSpec) -> TeacherTrainConfig:
    """The teacher config ``which`` names, with its overrides, on the lag's window
    (:meth:`RunSpec.teacher_window`): training days, then ``teacher_val_days`` validation days."""
    base = load_yaml(find_config(which.config, "teachers", spec.source_dir))
    base.update(which.overrides)
    first, end = spec.teacher_window(lag)
    v = spec.teacher_val_days
    base.update(train_days=[first, end - v], val_days=[end - v, end] if v else None,
                test_days=None)
    if not v:  # no validation days: no epoch to choose; the config's max_epochs are trained
        base.update(select="last", patience=None)
    return build_dataclass(TeacherTrainConfig, base, source=f"spec teacher (config "
                                                             f"{which.config})")


def fit_teacher(cfg: TeacherTrainConfig, data: Path, data_key: dict, cache: Path, log,
                name: str = "teacher", tracker=None, run_name: str = "teacher") -> Path:
    """Train (resuming a killed fit from its checkpoint); returns the run dir. ``tracker``
    (a ``gemkd.transfer.training.loggers.Tracker``) also logs the fit, as ``run_name``."""
    from gemkd.experiments.teacher_fit import fit_teacher as fit

    def run(step: Path) -> None:
        fit(cfg, data, step / "run", resume=True, progress=False, tracker=tracker,
            run_name=run_name)

    key = {"data": data_key, "teacher": dataclasses.asdict(cfg), **plugin_key([cfg.class_path])}
    step = cached_step(cache, name, key, run, log)
    return step / "run"


def export_teacher(run_dir: Path, data: Path, layer: str, cache: Path, log,
                   name: str = "store") -> Path:
    from gemkd.experiments.teacher_checkpoint import model_weights
    from gemkd.experiments.teacher_export import export_teacher as export
    from gemkd.transfer.store import TeacherStore, weights_hash
    from gemkd.transfer.training.trainer import best_or_last

    ckpt = best_or_last(run_dir)
    # step names carry upstream hashes
    key = {"teacher": run_dir.parent.name, "layer": layer, "checkpoint": ckpt.name}

    def run(step: Path) -> None:
        export(ckpt, data, step / "store", layer=layer, overwrite=True, progress=False)

    store = cached_step(cache, name, key, run, log) / "store"
    # the step is found by path: prove the store holds this checkpoint's outputs
    TeacherStore(store, verify_sha=False).check_teacher(weights_hash(model_weights(ckpt)),
                                                        f"the teacher checkpoint {ckpt}")
    return store


def build_codes(store: Path, window: tuple[int, int], repr_cfg, seed: int, cache: Path,
                log) -> Path:
    """LoopFM codes: a compressor fitted on the teacher's embeddings of its own window's days
    encodes every stored row; codes are quantised into a code store."""
    from gemkd.adapters.compressor import fit_compressor
    from gemkd.transfer.repr_features import quantize_codes, write_code_store
    from gemkd.transfer.store import TeacherStore

    code_dim, bits, epochs = repr_cfg.code_dim, repr_cfg.bits, repr_cfg.epochs
    key = {"store": fs.name(fs.parent(store)), "window": list(window), "code_dim": code_dim,
           "bits": bits, "epochs": epochs, "seed": seed}

    def run(step: Path) -> None:
        ts = TeacherStore(store)
        fit_table = ts.read(days=tuple(window))
        model, info = fit_compressor(ts.embeddings(fit_table), code_dim=code_dim,
                                     epochs=epochs, seed=seed)
        log(f"  compressor R² by prefix: "
            f"{ {p: round(r, 3) for p, r in info['r2'].items()} }")
        table = ts.read()
        with torch.no_grad():
            codes = model.encode(torch.from_numpy(ts.embeddings(table))).numpy()
        write_code_store(step / "codes", table["example_id"].to_numpy(),
                         table["user_id"].to_numpy(), table["ts"].to_numpy(),
                         table["day"].to_numpy(), quantize_codes(codes, bits), bits, code_dim,
                         {"teacher_version": ts.manifest.teacher_version,
                          "r2": {str(k): float(v) for k, v in info["r2"].items()}},
                         overwrite=True)

    return cached_step(cache, "codes", key, run, log) / "codes"


def oracle_logits(batch) -> torch.Tensor:
    p = batch.oracle.clamp(1e-6, 1 - 1e-6)
    return torch.log(p) - torch.log1p(-p)


def eval_metrics(data: Path, days: tuple[int, int], tasks: list[str], domains: list[str],
                 base_rates: dict[str, float], logits_fn,
                 only: list[str] | None = None, clusters: Path | None = None
                 ) -> dict[str, float]:
    """NE/AUC/calibration of ``logits_fn(batch)`` on ``days`` (and domains ``only``);
    ``clusters``: also write the per-user loss sums there (the report's bootstrap)."""
    from gemkd.transfer.data.reader import DatasetReader
    from gemkd.transfer.metrics import RankingMetrics
    from gemkd.transfer.metrics.clusters import ClusterLoss

    metrics = RankingMetrics(tasks, len(domains), domains, base_rates=base_rates)
    sums = ClusterLoss(len(tasks))
    for batch in DatasetReader(data, days=days, batch_size=8192, tasks=tasks, domains=only):
        logits = logits_fn(batch)
        metrics.update(logits, batch.labels, batch.domain)
        if clusters is not None:
            sums.update(logits, batch.labels, batch.user_id, batch.domain)
    if clusters is not None:
        sums.save(clusters, tasks, domains, base_rates)
    return {k: float(v) for k, v in metrics.compute().items()}


def feature_oracle_metrics(data: Path, days: tuple[int, int], tasks: list[str],
                           domains: list[str], base_rates: dict[str, float],
                           only: list[str] | None = None) -> dict[str, float]:
    """NE/AUC/calibration of the feature oracle (synthetic data: the world's probabilities with
    each user's vector replaced by what their history reveals, DESIGN §2.3) on ``days``."""
    import numpy as np

    from gemkd.transfer.data.synth.feature_oracle import feature_oracle_probs

    fo = feature_oracle_probs(data, range(*days), only)
    order = np.argsort(fo.example_id)
    ids = fo.example_id[order]
    p = np.clip(np.stack([fo.probs[t] for t in tasks], axis=1)[order], 1e-6, 1 - 1e-6)
    logits = torch.from_numpy(np.log(p) - np.log1p(-p)).float()

    def logits_fn(batch) -> torch.Tensor:
        return logits[torch.from_numpy(np.searchsorted(ids, batch.example_id.numpy()))]

    return eval_metrics(data, days, tasks, domains, base_rates, logits_fn, only)


def store_logits(store: Path, tasks: list[str]):
    from gemkd.transfer.distill import StoreTeacher
    from gemkd.transfer.store import TeacherStore

    teacher = StoreTeacher(TeacherStore(store), tasks, policy="error")
    return lambda batch: teacher(batch).logits


def has_oracle(data: Path) -> bool:
    from gemkd.transfer.data.schema import DatasetSchema

    return bool(DatasetSchema.load(data).oracle)
