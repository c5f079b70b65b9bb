"""The teacher's cached steps of a run: its config for a lag, its fit and its export (each a
cached step wrapping the library functions ``fit_teacher`` / ``export_teacher``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gemkd.experiments.run.cache import cached_step, plugin_key
from gemkd.experiments.spec.run_spec import RunSpec, TeacherSpec
from gemkd.experiments.teacher.teacher_config import (
    TEACHER_CONFIGS,
    TeacherTrainConfig,
    cache_key,
    find_config,
)
from gemkd.transfer.config import build_dataclass, load_yaml
from gemkd.transfer.errors import GemkdError


def teacher_values(spec: RunSpec, which: TeacherSpec) -> dict[str, Any]:
    """The keys of the teacher config ``which`` names (a file), with the spec's overrides."""
    base = load_yaml(find_config(which.config, TEACHER_CONFIGS, spec.source_dir))
    base.update(which.overrides)
    return base


def teacher_config(spec: RunSpec, lag: int, which: TeacherSpec, val_days: int
                   ) -> TeacherTrainConfig:
    """The teacher config ``which`` names, with its overrides, on the lag's window
    (:meth:`RunSpec.teacher_window`): training days, then the ``val_days`` validation days
    (:attr:`gemkd.experiments.run.spec_plan.RunPlan.val_days`)."""
    base = teacher_values(spec, which)
    if spec.teacher_protocol == "streaming" and which is spec.teacher:
        return streaming_config(spec, base, which)
    first, end = spec.teacher_window(lag)
    v = val_days
    base.update(train_days=[first, end - v], val_days=[end - v, end] if v else None,
                test_days=None)
    if not v:  # no validation days: no epoch to choose; the config's max_epochs are trained
        base.update(select="last", patience=None)
    elif spec.teacher_val_days is None and which is spec.teacher and "select" not in \
            which.overrides:
        # the day held out by default chooses the epoch: the best is kept, and training stops
        # at the first worse one
        base.update(select="best", patience=base.get("patience") or 1)
    return build_dataclass(TeacherTrainConfig, base, source=f"spec teacher (config "
                                                             f"{which.config})")


def streaming_config(spec: RunSpec, base: dict, which: TeacherSpec) -> TeacherTrainConfig:
    """The one streaming fit every lag's GEM comes from: a time-ordered pass over
    ``[teacher_stream_start, teacher_days)`` with daily checkpoints (the lag-L teacher:
    :func:`lag_checkpoint`)."""
    base.update(train_days=[spec.teacher_stream_start, spec.teacher_days], val_days=None,
                test_days=None, stream=True, max_epochs=1, select="last", patience=None)
    return build_dataclass(TeacherTrainConfig, base, source=f"spec teacher (config "
                                                             f"{which.config}, streaming)")


def lag_checkpoint(spec: RunSpec, run_dir: Path, lag: int) -> Path:
    """The checkpoint a lag's GEM is used from: the day ``teacher_days - lag - 1`` checkpoint of
    the streaming fit (the same model, ``lag`` days older), or the window fit's kept epoch."""
    from gemkd.transfer.teacher_fit_dir import TeacherFitDir

    if spec.teacher_protocol != "streaming":
        return TeacherFitDir(run_dir).best_or_last()
    ckpt = TeacherFitDir(run_dir).day(spec.teacher_days - lag - 1)
    if not ckpt.is_file():
        raise GemkdError(f"{ckpt}: the streaming teacher has no checkpoint of day "
                         f"{spec.teacher_days - lag - 1} (lag {lag})")
    return ckpt


def cached_fit(cfg: TeacherTrainConfig, data: Path, data_key: dict, cache: Path, log,
                name: str = "teacher", tracker=None, run_name: str = "teacher") -> Path:
    """Train (resuming a killed fit from its checkpoint); returns the run dir. ``tracker``
    (a ``gemkd.transfer.training.loggers.Tracker``) also logs the fit, as ``run_name``."""
    from gemkd.experiments.run.progress import FitProgress
    from gemkd.experiments.teacher.teacher_fit import fit_teacher as fit

    def run(step: Path) -> None:
        fit(cfg, data, step / "run", resume=True, progress=False, tracker=tracker,
            run_name=run_name, callbacks=[FitProgress(log, name)])

    key = {"data": data_key, "teacher": cache_key(cfg), **plugin_key([cfg.class_path])}
    step = cached_step(cache, name, key, run, log)
    return step / "run"


def cached_export(ckpt: Path, data: Path, layer: str, cache: Path, log, name: str = "store",
                  days: tuple[int, int] | None = None) -> Path:
    """The store of the teacher at ``ckpt`` (a checkpoint of a cached fit's run dir) over
    ``days`` of ``data`` (all when None)."""
    from gemkd.experiments.teacher.teacher_checkpoint import model_weights
    from gemkd.experiments.teacher.teacher_export import export_teacher as export
    from gemkd.transfer.store import TeacherStore, weights_hash
    from gemkd.transfer.teacher_fit_dir import TeacherFitDir

    run_dir = TeacherFitDir.of_checkpoint(ckpt).root
    # step names carry upstream hashes
    key: dict = {"teacher": run_dir.parent.name, "layer": layer, "checkpoint": ckpt.name}
    if days is not None:
        key["days"] = list(days)

    def run(step: Path) -> None:
        export(ckpt, data, step / "store", days=days, layer=layer, overwrite=True,
               progress=False)

    store = cached_step(cache, name, key, run, log) / "store"
    # the step is found by path: prove the store holds this checkpoint's outputs
    TeacherStore(store, verify_sha=False).check_teacher(weights_hash(model_weights(ckpt)),
                                                        f"the teacher checkpoint {ckpt}")
    return store
