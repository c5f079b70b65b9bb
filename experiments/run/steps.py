"""The cached steps of ``gemkd run``: data, teacher fit, teacher export, LoopFM codes."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from experiments.run.cache import cached_step
from experiments.run.spec import EXPERIMENTS, RunSpec
from experiments.teacher_cli import TeacherTrainConfig, teacher_fit
from experiments.teacher_export import model_weights, teacher_export
from transfer.config import build_dataclass, load_yaml
from transfer.errors import ConfigError

DEFAULT_MOVIELENS = EXPERIMENTS.parents[1] / "shared" / "data" / "movielens_latest_small"


def data_plan(spec: RunSpec) -> tuple[dict, Callable[[Path], Any]]:
    """The data step's cache key and its builder ``make(out_dir)``; a bad ``data:`` section is a
    ConfigError here, before anything is written."""
    d = dict(spec.data)
    source = d.pop("source", "synthetic")
    if source == "synthetic":
        from transfer.data.synth import SynthConfig, generate

        preset = d.pop("preset", "small")
        values = load_yaml(EXPERIMENTS / "data" / f"{preset}.yaml")
        values.update(d)
        cfg = build_dataclass(SynthConfig, values, source=f"spec data (preset {preset})")
        key = {"source": source, **dataclasses.asdict(cfg)}
        return key, lambda out: generate(cfg, out, overwrite=True)
    if source == "movielens":
        from transfer.data.movielens import convert_movielens

        src = Path(d.pop("src", DEFAULT_MOVIELENS))
        args = {"n_days": d.pop("n_days", 20), "max_history": d.pop("max_history", 1024)}
        if d:
            raise ConfigError(f"spec data: unknown key {sorted(d)[0]!r} for source movielens "
                              "(keys: src, n_days, max_history)")
        key = {"source": source, "src": str(src.resolve()), **args}
        return key, lambda out: convert_movielens(src, out, overwrite=True, **args)
    raise ConfigError(f"spec data.source {source!r}: expected synthetic or movielens")


def prepare_data(spec: RunSpec, cache: Path, log) -> tuple[Path, dict]:
    """Generate (synthetic) or convert (movielens) the dataset; returns its dir and cache key."""
    key, make = data_plan(spec)
    step = cached_step(cache, "data", key, lambda out: make(out / "data"), log)
    return step / "data", key


def teacher_config(spec: RunSpec, train_end: int, which: dict[str, Any]) -> TeacherTrainConfig:
    values = dict(which)
    name = values.pop("config", "small")
    base = load_yaml(EXPERIMENTS / "teachers" / f"{name}.yaml")
    base.update(values)
    base.update(train_days=[0, train_end], val_days=None, test_days=None)
    return build_dataclass(TeacherTrainConfig, base, source=f"spec teacher (config {name})")


def fit_teacher(cfg: TeacherTrainConfig, data: Path, data_key: dict, cache: Path, log,
                name: str = "teacher") -> Path:
    """Train (resuming a killed fit from its checkpoint); returns the run dir."""
    import yaml

    def run(step: Path) -> None:
        config = step / "teacher.yaml"
        config.write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
        teacher_fit(argparse.Namespace(config=str(config), data=str(data), out=str(step / "run"),
                                       strategy=None, devices=None, resume=True,
                                       no_progress=True))

    step = cached_step(cache, name, {"data": data_key, "teacher": dataclasses.asdict(cfg)}, run,
                       log)
    return step / "run"


def export_teacher(run_dir: Path, data: Path, layer: str, cache: Path, log,
                   name: str = "store") -> Path:
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    key = {"teacher": run_dir.parent.name, "layer": layer}  # step names carry upstream hashes

    def run(step: Path) -> None:
        teacher_export(argparse.Namespace(
            ckpt=str(ckpt), data=str(data), out=str(step / "store"), days=None, layer=layer,
            emb_dtype="float16", config=None, batch_size=4096, devices=1, overwrite=True,
            no_progress=True))

    store = cached_step(cache, name, key, run, log) / "store"
    from transfer.store import TeacherStore, weights_hash

    # the step is found by path: prove the store holds this checkpoint's outputs
    TeacherStore(store, verify_sha=False).check_teacher(weights_hash(model_weights(ckpt)),
                                                        f"the teacher checkpoint {ckpt}")
    return store


def build_codes(store: Path, train_end: int, repr_cfg: dict, seed: int, cache: Path,
                log) -> Path:
    """LoopFM codes: a compressor fitted on the teacher's training-day embeddings encodes every
    stored row; codes are quantised into a code store."""
    from adapters.compressor import fit_compressor
    from transfer.repr_features import quantize_codes, write_code_store
    from transfer.store import TeacherStore

    code_dim, bits = int(repr_cfg.get("code_dim", 8)), int(repr_cfg.get("bits", 8))
    epochs = int(repr_cfg.get("epochs", 10))
    key = {"store": store.parent.name, "train_end": train_end, "code_dim": code_dim, "bits": bits,
           "epochs": epochs, "seed": seed}

    def run(step: Path) -> None:
        ts = TeacherStore(store)
        fit_table = ts.read(days=(0, train_end))
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
                 only: list[str] | None = None) -> dict[str, float]:
    """NE/AUC/calibration of ``logits_fn(batch)`` on ``days`` (and domains ``only``)."""
    from transfer.data.reader import DatasetReader
    from transfer.metrics import RankingMetrics

    metrics = RankingMetrics(tasks, len(domains), domains, base_rates=base_rates)
    for batch in DatasetReader(data, days=days, batch_size=8192, tasks=tasks, domains=only):
        metrics.update(logits_fn(batch), batch.labels, batch.domain)
    return {k: float(v) for k, v in metrics.compute().items()}


def store_logits(store: Path, tasks: list[str]):
    from transfer.distill import StoreTeacher
    from transfer.store import TeacherStore

    teacher = StoreTeacher(TeacherStore(store), tasks, policy="error")
    return lambda batch: teacher(batch)[0]


def has_oracle(data: Path) -> bool:
    from transfer.data.schema import DatasetSchema

    return bool(DatasetSchema.load(data).oracle)
