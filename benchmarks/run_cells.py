"""The (world, teacher lag) cells of a finished ``gemkd run`` directory, found from what its cache
holds — so a benchmark can train more student arms on exactly the run's teacher stores even after
the code changed (a changed source changes every step's cache key, so rerunning the spec would
redo the teacher fits instead).

Each store step's manifest names the teacher checkpoint and the data it was exported from and the
day the teacher was trained until; the lag is the spec's lag whose teacher window ends there. The
domain-FM store and the LoopFM codes of a cell are the steps whose config names its store.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from gemkd.experiments.spec.model import RunSpec


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


def _in_cache(run: Path, recorded: str) -> Path:
    """A path the step recorded, moved under ``run``'s cache (the run folder may have been
    renamed since): the part from the step folder (``<name>-<hash>``) on is kept."""
    parts = Path(recorded).parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "cache" and i + 1 < len(parts):
            return run / "cache" / Path(*parts[i + 1:])
    return Path(recorded)


def _config(step: Path) -> dict:
    return json.loads((step / "config.json").read_text())["config"]


def find_cells(run: str | Path, spec: RunSpec) -> list[Cell]:
    """Every finished GEM store of ``run`` as a cell, sorted by (world, lag)."""
    run = Path(run)
    cache = run / "cache"
    worlds = {step.name: int(_config(step).get("seed", 0) or 0)
              for step in cache.glob("data-*") if (step / "DONE").exists()}
    fms = {_config(s)["gem_store"]: s / "store" for s in cache.glob("domain_fm-*")
           if (s / "DONE").exists()}
    codes = {_config(s)["store"]: s / "codes" for s in cache.glob("codes-*")
             if (s / "DONE").exists()}
    ends = {spec.teacher_seen(lag)[1] - 1: lag for lag in spec.lags}
    cells = []
    for step in sorted(cache.glob("store-*")):
        if not (step / "DONE").exists():
            continue
        manifest = json.loads((step / "store" / "manifest.json").read_text())
        until = int(manifest["trained_until_day"])
        if until not in ends:
            continue  # a store of another spec's lag
        data = _in_cache(run, manifest["extra"]["data"])
        world = worlds.get(data.parent.name, 0)
        stores = {"gem": step / "store"}
        if step.name in fms:
            stores["domain_fm"] = fms[step.name]
        ckpt = manifest["extra"].get("checkpoint")
        cells.append(Cell(world, ends[until], data, stores, codes.get(step.name),
                          _in_cache(run, ckpt) if ckpt else None, until))
    if not cells:
        raise SystemExit(f"{run}: no finished teacher store of the spec's lags "
                         f"{list(spec.lags)} in cache/")
    return sorted(cells, key=lambda c: (c.world, c.lag))
