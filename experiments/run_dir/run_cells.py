"""What a finished run's students learned from, found from what its cache holds — so a study can
train more student arms on exactly the run's teacher stores, or score its teacher's checkpoints,
even after the code changed (a changed source changes every step's cache key, so rerunning the
spec would redo the teacher fits instead).

Each store step's manifest names the teacher checkpoint and the data it was exported from and the
day the teacher was trained until; the lag is the spec's lag whose teacher window ends there. The
domain-FM store and the LoopFM codes of a cell are the steps whose config names its store. It
reads the run through :class:`gemkd.experiments.run_dir.RunDir` (which knows nothing of cells):
``find_cells(RunDir(path), plan_run(spec).seen)`` and ``teacher_fits(RunDir(path))``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemkd.transfer.errors import ConfigError

if TYPE_CHECKING:
    from gemkd.experiments.run_dir import RunDir


@dataclasses.dataclass(frozen=True)
class Cell:
    """What one (world, lag) of the run's students learned from."""

    world: int
    lag: int
    data: Path
    stores: dict[str, Path]
    codes: Path | None
    ckpt: Path | None
    trained_until_day: int


@dataclasses.dataclass(frozen=True)
class TeacherFit:
    """One world's teacher fit: the world's seed, its data and the fit's folder (its config,
    checkpoints and metrics)."""

    seed: int
    data: Path
    run: Path


def step_config(step: Path) -> dict[str, Any]:
    """The config a cached step was keyed by (``config.json``'s ``config``)."""
    path = step / "config.json"
    try:
        return json.loads(path.read_text())["config"]
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"{path}: not a cached step's config ({e})") from None


def _in_cache(run: RunDir, recorded: str) -> Path:
    """A path the step recorded, moved under ``run``'s cache (the run folder may have been
    renamed since): the part from the step folder (``<name>-<hash>``) on is kept."""
    parts = Path(recorded).parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == run.CACHE and i + 1 < len(parts):
            return run.cache / Path(*parts[i + 1:])
    return Path(recorded)


def _world_seed(config: dict[str, Any]) -> int:
    return int(config.get("seed", 0) or 0)


def find_cells(run: RunDir, seen: dict[int, tuple[int, int]]) -> list[Cell]:
    """Every finished GEM store of ``run`` of one of the lags of ``seen`` (lag → the days its
    teacher trained on: :attr:`gemkd.experiments.run.spec_plan.RunPlan.seen`), sorted by (world,
    lag)."""
    worlds = {s.name: _world_seed(step_config(s)) for s in run.steps("data")}
    fms = {step_config(s)["gem_store"]: s / "store" for s in run.steps("domain_fm")}
    codes = {step_config(s)["store"]: s / "codes" for s in run.steps("codes")}
    ends = {days[1] - 1: lag for lag, days in seen.items()}
    cells = []
    for step in run.steps("store"):
        manifest = json.loads((step / "store" / "manifest.json").read_text())
        until = int(manifest["trained_until_day"])
        if until not in ends:
            continue  # a store of another spec's lag
        data = _in_cache(run, manifest["extra"]["data"])
        stores = {"gem": step / "store"}
        if step.name in fms:
            stores["domain_fm"] = fms[step.name]
        ckpt = manifest["extra"].get("checkpoint")
        cells.append(Cell(worlds.get(data.parent.name, 0), ends[until], data, stores,
                          codes.get(step.name), _in_cache(run, ckpt) if ckpt else None, until))
    if not cells:
        raise ConfigError(f"{run.cache}: no finished teacher store of the spec's lags "
                          f"{list(seen)}")
    return sorted(cells, key=lambda c: (c.world, c.lag))


def teacher_fits(run: RunDir, streaming: bool = True) -> list[TeacherFit]:
    """Each world's finished teacher fit (``streaming``: only fits of a spec with
    ``teacher_protocol: streaming``), matched to its data step on the data's config."""
    data = {json.dumps(step_config(s), sort_keys=True): (_world_seed(step_config(s)), s / "data")
            for s in run.steps("data")}
    fits = []
    for step in run.steps("teacher"):
        cfg = step_config(step)
        if streaming and not cfg["teacher"].get("stream"):
            continue
        found = data.get(json.dumps(cfg["data"], sort_keys=True))
        if found is None:
            raise ConfigError(f"{step}: its data step is not in {run.cache} (a partial copy of "
                              "the run directory?)")
        fits.append(TeacherFit(found[0], found[1], step / "run"))
    if not fits:
        what = ("streaming teacher fit (a run of a spec with teacher_protocol: streaming)"
                if streaming else "teacher fit")
        raise ConfigError(f"{run.cache}: no finished {what}")
    return sorted(fits, key=lambda f: f.seed)
