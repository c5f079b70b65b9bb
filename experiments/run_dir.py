"""A ``gemkd run`` directory, written and read through one class: what the runner writes, where,
and how it reads back (the runner, the report, the studies, the benchmarks and the CLI go through
:class:`RunDir`, never through the file names themselves). Whole files are written atomically
(a temporary name, then a rename: a reader never sees a torn file); the ledger and the log grow
a line at a time.

Layout (version :data:`LAYOUT_VERSION`, recorded in ``run.json``; a run written before the file
existed reads as version 1)::

    run.json                  {"layout_version": 1}
    spec.yaml                 the spec as run (RunSpec.to_dict())
    environment.json          versions and torch thread counts (``threads``, ``run_threads``)
    command.txt               the command line
    log.txt                   the run's progress log
    phases.json               the run's wall seconds per phase (steps, tuning, final runs)
    runs.jsonl                the ledger: one finished student run a line, {"key": ..., ...}
    results.csv               one row per variant × seed × world × domain × task × lag
                              (gemkd.experiments.results_schema)
    tuning.csv                every search trial, one row per knob (run.tuning_table)
    teacher_data.json         teacher vs student rows per world and lag (run.data_ratio)
    teacher_fit.json          each teacher fit's validation curve and kept epoch (run.teacher_curve)
    sampled_negatives.json    how a positive-only log's negatives were drawn (when they were)
    curves/<variant>_seed<S>_lag<L>[_w<W>].csv                 a final run's training curve
    clusters/world=<W>/lag=<L>/<variant>__seed<S>.npz           per-user evaluation sums
    clusters/world=<W>/lag=<L>/teacher__<source>.npz            ... of a teacher's store
    cache/<step>-<hash>/{config.json, DONE, ...}              cached steps (run.cache)
    logs/prepare_world<W>.txt                                 a worker's lines per prepared world
    logs/...                                                  a tracker's files (the spec's logger)
    .lock                                                     held by the run that owns it
    report.md, intervals.csv, plots/                          written by ``gemkd report``
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import yaml

from gemkd.experiments.results_schema import WORLD, one_domain, validate_results
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.io.atomic import atomic_write_bytes

if TYPE_CHECKING:
    from gemkd.experiments.spec.run_spec import RunSpec

log = logging.getLogger(__name__)

#: The layout this gemkd writes and the newest it reads; bump it when a file moves or changes
#: meaning, and teach :class:`RunDir` to read the older ones.
LAYOUT_VERSION = 1
#: Tuning columns a reader needs (the runner writes more: run.tuning_table.TUNING_COLUMNS).
TUNING_REQUIRED: tuple[str, ...] = ("variant", "param", "value", "chosen", "val_ne")
CURVE_METRICS: tuple[str, ...] = ("train_loss", "kd_loss", "val_ne")
_CURVE = re.compile(r"^(?P<variant>.+)_seed(?P<seed>-?\d+)_lag(?P<lag>-?\d+(?:\.\d+)?)"
                    r"(?:_w(?P<world>-?\d+))?$")
_WORLD_DIR = re.compile(r"^world=(?P<world>-?\d+)$")
_LAG_DIR = re.compile(r"^lag=(?P<lag>-?\d+(?:\.\d+)?)$")
_WORLD_KEY = re.compile(r"^w(?P<world>-?\d+)$")


def _lag(text: str) -> int | float:
    lag = float(text)
    return int(lag) if lag.is_integer() else lag


@dataclass(frozen=True)
class FinalRun:
    """A final student run of the ledger: ``world`` None in a run of one world (its key names
    none); ``record`` the ledger line without its key (``metrics``, timings, ...)."""

    variant: str
    seed: int
    lag: int | float
    world: int | None
    record: dict[str, Any]


class RunDir:
    """One run directory. Constructing it checks the layout version (a newer one is a
    ConfigError saying which gemkd to use); every reader names the file it could not read;
    every writer replaces its file whole (atomically), except the ledger's and the log's lines,
    which are appended."""

    RUN_JSON = "run.json"
    SPEC = "spec.yaml"
    ENVIRONMENT = "environment.json"
    COMMAND = "command.txt"
    LOG = "log.txt"
    PHASES = "phases.json"
    LEDGER = "runs.jsonl"
    RESULTS = "results.csv"
    TUNING = "tuning.csv"
    TEACHER_DATA = "teacher_data.json"
    TEACHER_FIT = "teacher_fit.json"
    NEGATIVES = "sampled_negatives.json"
    CURVES = "curves"
    CLUSTERS = "clusters"
    CACHE = "cache"
    LOGS = "logs"
    PLOTS = "plots"
    REPORT = "report.md"
    INTERVALS = "intervals.csv"
    LOCK = ".lock"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.layout_version = read_layout_version(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r}, layout_version={self.layout_version})"

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    # ---- paths ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.resolve().name

    @property
    def cache(self) -> Path:
        return self.path / self.CACHE

    @property
    def clusters_dir(self) -> Path:
        return self.path / self.CLUSTERS

    @property
    def logs_dir(self) -> Path:
        """Where a tracker's files and the workers' per-world lines go."""
        return self.path / self.LOGS

    @property
    def lock_path(self) -> Path:
        """The lock the run that owns the directory holds."""
        return self.path / self.LOCK

    @property
    def log_path(self) -> Path:
        """The run's progress log (appended to by ``run.progress.Progress``)."""
        return self.path / self.LOG

    @property
    def ledger_path(self) -> Path:
        return self.path / self.LEDGER

    @property
    def results_path(self) -> Path:
        return self.path / self.RESULTS

    @property
    def tuning_path(self) -> Path:
        return self.path / self.TUNING

    @property
    def phases_path(self) -> Path:
        return self.path / self.PHASES

    def prepare_log_path(self, world: int | None) -> Path:
        """A worker's lines while it prepares ``world``'s cached steps."""
        return self.logs_dir / f"prepare_world{world}.txt"

    def curve_path(self, variant: str, seed: int, lag: int | float,
                   world: int | None = None) -> Path:
        """A final run's training curve (``world`` only in a run over several worlds)."""
        suffix = f"_w{world}" if world is not None else ""
        return self.path / self.CURVES / f"{variant}_seed{seed}_lag{lag}{suffix}.csv"

    def clusters_path(self, world: int, lag: int | float, name: str) -> Path:
        """Per-user evaluation sums of ``name`` (``<variant>__seed<S>`` or
        ``teacher__<source>``) at one world and lag."""
        return self.clusters_dir / f"world={world}" / f"lag={lag}" / f"{name}.npz"

    # ---- readers -------------------------------------------------------------------------
    def results(self) -> pd.DataFrame:
        """``results.csv`` validated (results_schema); a student of one domain's rows under that
        domain's name only (an older run also wrote them as ``all``)."""
        path = self.path / self.RESULTS
        if not path.is_file():
            raise ConfigError(f"{path}: results file not found (run `gemkd run` first, or "
                              "wait until it finishes: results.csv is written last)")
        return one_domain(validate_results(read_csv(path), str(path)))

    def spec(self) -> dict[str, Any] | None:
        """``spec.yaml`` as a mapping (None when the run has none)."""
        from gemkd.transfer.config import load_yaml

        path = self.path / self.SPEC
        return load_yaml(path) if path.is_file() else None

    def run_spec(self) -> RunSpec:
        """``spec.yaml`` as the typed spec the run ran."""
        from gemkd.experiments.spec import load_spec

        path = self.path / self.SPEC
        if not path.is_file():
            raise ConfigError(f"{path}: spec file not found (not a gemkd run directory?)")
        return load_spec(path)

    def environment(self) -> dict[str, Any]:
        """``environment.json`` (empty for a run without it)."""
        return self._json(self.ENVIRONMENT) or {}

    def teacher_data(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``teacher_data.json``: world → lag → the teacher's and the student's rows (empty for
        a run before it or with an imported store)."""
        return self._json(self.TEACHER_DATA) or {}

    def teacher_fit(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``teacher_fit.json``: world → lag → the teacher fit's days, epochs trained, the
        epoch kept, its validation curve (per epoch: loss, and NE, AUC, calibration per task)
        and the kept teacher's validation metrics (empty for a run before it or with an
        imported store; :mod:`gemkd.experiments.run.teacher_curve`)."""
        return self._json(self.TEACHER_FIT) or {}

    def sampled_negatives(self) -> dict[str, Any] | None:
        """How the data's negatives were sampled (a positive-only log), or None: logged
        impressions."""
        return self._json(self.NEGATIVES)

    def tuning(self) -> pd.DataFrame | None:
        """``tuning.csv`` validated, or None when the run has none."""
        path = self.path / self.TUNING
        if not path.is_file():
            return None
        frame = read_csv(path)
        missing = [c for c in TUNING_REQUIRED if c not in frame.columns]
        if missing:
            raise ConfigError(f"{path}: missing column {missing[0]!r}; expected columns: "
                              f"{', '.join(TUNING_REQUIRED)}")
        out = frame.copy()
        out["chosen"] = [_truthy(v, path) for v in out["chosen"]]
        out["val_ne"] = pd.to_numeric(out["val_ne"], errors="coerce")
        out["variant"] = out["variant"].astype(str)
        out["param"] = out["param"].astype(str)
        return out

    def tuning_digest(self) -> str | None:
        """sha256 of ``tuning.csv`` (None without one): what a study that reuses the run's
        chosen knobs records, so a report can tell whether they are still the run's."""
        path = self.path / self.TUNING
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None

    def curves(self) -> pd.DataFrame | None:
        """Every ``curves/*.csv`` stacked with ``variant, seed, world, teacher_lag_days``
        columns, or None."""
        cdir = self.path / self.CURVES
        if not cdir.is_dir():
            return None
        parts = []
        for path in sorted(cdir.glob("*.csv")):
            m = _CURVE.match(path.stem)
            if m is None:
                log.warning("%s: name is not <variant>_seed<k>_lag<l>[_w<world>].csv; skipped",
                            path)
                continue
            frame = read_csv(path)
            for col in ("step", "train_loss"):
                if col not in frame.columns:
                    raise ConfigError(f"{path}: missing column {col!r}; expected step, "
                                      "train_loss [, kd_loss, val_ne]")
            keep = [c for c in ("step", *CURVE_METRICS) if c in frame.columns]
            frame = frame[keep].apply(pd.to_numeric, errors="coerce")
            frame["variant"] = m["variant"]
            frame["seed"] = int(m["seed"])
            frame[WORLD] = int(m["world"]) if m["world"] is not None else 0
            frame["teacher_lag_days"] = _lag(m["lag"])
            parts.append(frame)
        return pd.concat(parts, ignore_index=True) if parts else None

    def ledger(self) -> dict[str, dict[str, Any]]:
        """``runs.jsonl``: key → record of every finished student run (a line torn by a kill
        is left out: that run is redone)."""
        return read_ledger(self.path / self.LEDGER)

    def final_runs(self) -> list[FinalRun]:
        """The ledger's final student runs (keys ``final|variant|seed|lag|[w<world>|]...``),
        in the ledger's order: what a study reads while results.csv is not written yet."""
        out = []
        for key, rec in self.ledger().items():
            parts = key.split("|")
            if parts[0] != "final" or len(parts) < 4:
                continue
            w = next((m for p in parts[4:] if (m := _WORLD_KEY.match(p))), None)
            out.append(FinalRun(parts[1], int(parts[2]), _lag(parts[3]),
                                int(w["world"]) if w else None, rec))
        return out

    def has_clusters(self) -> bool:
        """Does the run keep per-user evaluation files (the oldest runs do not)?"""
        return self.clusters_dir.is_dir() and any(self.clusters_dir.glob("world=*/lag=*/*.npz"))

    def eval_folders(self) -> list[tuple[int, int | float, Path]]:
        """``(world, lag, folder)`` of every ``clusters/world=W/lag=L`` folder, sorted by
        world then lag; a folder of another name is skipped with a warning."""
        out = []
        for wdir in sorted(self.clusters_dir.glob("world=*")):
            w = _WORLD_DIR.match(wdir.name)
            if w is None or not wdir.is_dir():
                log.warning("%s: not a world=<seed> folder; skipped", wdir)
                continue
            for ldir in sorted(wdir.glob("lag=*")):
                m = _LAG_DIR.match(ldir.name)
                if m is None or not ldir.is_dir():
                    log.warning("%s: not a lag=<days> folder; skipped", ldir)
                    continue
                out.append((int(w["world"]), _lag(m["lag"]), ldir))
        return out

    def steps(self, name: str) -> list[Path]:
        """The finished cached steps ``cache/<name>-<hash>`` (those with ``DONE``), sorted."""
        return [s for s in sorted(self.cache.glob(f"{name}-*")) if (s / "DONE").is_file()]

    def has_done_steps(self) -> bool:
        """Any finished cached step (of any name)."""
        return any(self.cache.glob("*/DONE"))

    def phases(self) -> dict[str, float] | None:
        """``phases.json``: phase name → wall seconds of the run that did the work, or None
        when the run has none (not finished, or before the file existed)."""
        phases = self._json(self.PHASES)
        if phases is None:
            return None
        if not isinstance(phases, dict) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in phases.values()):
            raise ConfigError(f"{self.phases_path}: expected an object of phase name -> seconds")
        return phases

    def command(self) -> str:
        """``command.txt``: the command line the run was made with ("" without the file)."""
        path = self.path / self.COMMAND
        return path.read_text().strip() if path.is_file() else ""

    # ---- writers (the runner) ------------------------------------------------------------
    def write_layout(self) -> None:
        """Record :data:`LAYOUT_VERSION` in ``run.json`` (the runner, before any other file);
        a run directory of a newer layout is refused rather than mixed with this one."""
        self.layout_version = read_layout_version(self.path)
        self._write(self.RUN_JSON, json.dumps({"layout_version": LAYOUT_VERSION}) + "\n")
        self.layout_version = LAYOUT_VERSION

    def write_spec(self, spec: Mapping[str, Any]) -> None:
        """``spec.yaml``: the spec as run (``RunSpec.to_dict()``), in its own key order."""
        self._write(self.SPEC, yaml.safe_dump(dict(spec), sort_keys=False))

    def write_environment(self, environment: Mapping[str, Any]) -> None:
        """``environment.json``: versions and torch thread counts."""
        self._write(self.ENVIRONMENT, json.dumps(dict(environment), indent=2))

    def write_command(self, argv: Sequence[str]) -> None:
        """``command.txt``: the command line, one line."""
        self._write(self.COMMAND, " ".join(argv) + "\n")

    def write_results(self, results: pd.DataFrame) -> None:
        """``results.csv`` (written last: a reader takes it as the run's end)."""
        self._write(self.RESULTS, results.to_csv(index=False))

    def write_tuning(self, tuning: pd.DataFrame) -> None:
        """``tuning.csv``: every search trial, one row per knob."""
        self._write(self.TUNING, tuning.to_csv(index=False))

    def write_phases(self, phases: Mapping[str, float]) -> None:
        """``phases.json``: wall seconds per phase, to a tenth."""
        self._write(self.PHASES, json.dumps({k: round(v, 1) for k, v in phases.items()},
                                            indent=2) + "\n")

    def write_sampled_negatives(self, negatives: Mapping[str, Any]) -> None:
        """``sampled_negatives.json``: how a positive-only log's negatives were drawn."""
        self._write(self.NEGATIVES, json.dumps(negatives, indent=2))

    def record_teacher_data(self, world: int | None, lag: int | float,
                            entry: dict[str, Any]) -> None:
        """Add the (world, lag) entry to ``teacher_data.json`` (the file rewritten whole)."""
        self._record(self.TEACHER_DATA, world, lag, entry)

    def record_teacher_fit(self, world: int | None, lag: int | float,
                           entry: dict[str, Any]) -> None:
        """Add the (world, lag) entry to ``teacher_fit.json`` (the file rewritten whole)."""
        self._record(self.TEACHER_FIT, world, lag, entry)

    def append_ledger(self, key: str, record: dict[str, Any]) -> dict[str, Any]:
        """Add a finished student run to ``runs.jsonl`` (one line, appended: a line torn by a
        kill is left out by :meth:`ledger`, and that run redone); returns ``record``."""
        with open(self.ledger_path, "a") as f:
            f.write(json.dumps({"key": key, **record}) + "\n")
        return record

    def _record(self, name: str, world: int | None, lag: int | float,
                entry: dict[str, Any]) -> None:
        table = self._json(name) or {}
        table.setdefault(str(world if world is not None else 0), {})[str(lag)] = entry
        self._write(name, json.dumps(table, indent=2))

    def _write(self, name: str, text: str) -> None:
        atomic_write_bytes(self.path / name, text.encode())

    def _json(self, name: str) -> Any:
        path = self.path / name
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError as e:
            raise ConfigError(f"{path}: not readable JSON: {e}") from None


def read_layout_version(path: Path) -> int:
    """The layout version of the run directory at ``path``: ``run.json``'s, 1 without one (a
    run before the file existed); an unknown or newer version is a ConfigError."""
    file = path / RunDir.RUN_JSON
    if not file.is_file():
        return 1
    try:
        version = json.loads(file.read_text())["layout_version"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{file}: expected {{\"layout_version\": <int>}}; this file says "
                          "which layout the run directory has") from None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigError(f"{file}: layout_version {version!r} is not a layout gemkd knows "
                          f"(1 to {LAYOUT_VERSION})")
    if version > LAYOUT_VERSION:
        raise ConfigError(f"{file}: layout_version {version} is newer than this gemkd reads "
                          f"(up to {LAYOUT_VERSION}): the run was written by a newer gemkd; "
                          "read it with that version (pip install -U gemkd)")
    return version


def read_ledger(path: Path) -> dict[str, dict[str, Any]]:
    """A ledger file (``runs.jsonl``): key → record; a line torn by a kill is left out."""
    done: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[rec.pop("key")] = rec
    return done


def read_csv(path: Path) -> pd.DataFrame:
    """A CSV of the run directory; empty or unreadable is a ConfigError naming it."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        msg = " ".join(str(e).split())
        raise ConfigError(f"{path}: not a readable CSV: {msg}") from None


def _truthy(value: Any, path: Path) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "1.0", "yes", "y"):
        return True
    if text in ("false", "0", "0.0", "no", "n", "", "nan"):
        return False
    raise ConfigError(f"{path}: column 'chosen': expected true/false, got {value!r}")
