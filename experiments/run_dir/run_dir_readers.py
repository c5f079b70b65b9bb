"""Reading a run directory back (:class:`~gemkd.experiments.run_dir.RunDir`'s readers): every
reader names the file it could not read."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gemkd.experiments.run_dir.results_schema import WORLD, one_domain, validate_results
from gemkd.experiments.run_dir.run_dir_layout import RunDirLayout
from gemkd.transfer.errors import ConfigError

if TYPE_CHECKING:
    from gemkd.experiments.spec.run_spec import RunSpec

log = logging.getLogger(__name__)

#: Tuning columns a reader needs (the runner writes more: run.tuning_rows.TUNING_COLUMNS).
TUNING_REQUIRED: tuple[str, ...] = ("variant", "param", "value", "chosen", "val_ne")
CURVE_METRICS: tuple[str, ...] = ("train_loss", "kd_loss", "val_ne")
_CURVE = re.compile(r"^(?P<variant>.+)_seed(?P<seed>-?\d+)_lag(?P<lag>-?\d+(?:\.\d+)?)"
                    r"(?:_w(?P<world>-?\d+))?$")
_WORLD_DIR = re.compile(r"^world=(?P<world>-?\d+)$")
_LAG_DIR = re.compile(r"^lag=(?P<lag>-?\d+(?:\.\d+)?)$")
_WORLD_KEY = re.compile(r"^w(?P<world>-?\d+)$")
_STUDENT = re.compile(r"^(?P<variant>.+)__seed(?P<seed>-?\d+)\.pt$")


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


@dataclass(frozen=True)
class KeptStudent:
    """A final student the run kept (``students/world=W/lag=L/<variant>__seed<S>.pt``)."""

    variant: str
    seed: int
    lag: int | float
    world: int
    path: Path


class RunDirReaders(RunDirLayout):
    """The readers of :class:`~gemkd.experiments.run_dir.RunDir`."""

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
        from gemkd.experiments.spec.load import nest_open_keys
        from gemkd.transfer.config import load_yaml

        path = self.path / self.SPEC
        return nest_open_keys(load_yaml(path)) if path.is_file() else None

    def run_spec(self) -> RunSpec:
        """``spec.yaml`` as the typed spec the run ran."""
        from gemkd.experiments.spec import load_spec

        path = self.path / self.SPEC
        if not path.is_file():
            raise ConfigError(f"{path}: spec file not found (not a gemkd run directory?)")
        return load_spec(path, written_by_run=True)

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
        imported store; :mod:`gemkd.experiments.teacher.teacher_curve`)."""
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

    def kept_students(self) -> list[KeptStudent]:
        """Every kept final student, sorted by world, lag, variant and seed."""
        out = []
        for world, lag, _ in self._student_folders():
            folder = self.student_path(world, lag, "x", 0).parent
            for f in sorted(folder.glob("*.pt")):
                m = _STUDENT.match(f.name)
                if m is not None:
                    out.append(KeptStudent(m["variant"], int(m["seed"]), lag, world, f))
        return sorted(out, key=lambda k: (k.world, k.lag, k.variant, k.seed))

    def _student_folders(self) -> list[tuple[int, int | float, Path]]:
        out = []
        for wdir in sorted(self.students_dir.glob("world=*")):
            w = _WORLD_DIR.match(wdir.name)
            if w is None:
                continue
            for ldir in sorted(wdir.glob("lag=*")):
                m = _LAG_DIR.match(ldir.name)
                if m is not None:
                    out.append((int(w["world"]), _lag(m["lag"]), ldir))
        return out

    def read_student(self, kept: KeptStudent) -> dict[str, Any]:
        """A kept student's payload (``torch.load(weights_only=True)``: tensors and plain
        values only); an unreadable file is a ConfigError naming it."""
        import pickle

        import torch

        try:
            payload = torch.load(kept.path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
            raise ConfigError(f"{kept.path}: not a readable kept student ({e})") from None
        if not isinstance(payload, dict) or "state_dict" not in payload:
            raise ConfigError(f"{kept.path}: not a kept student (no state_dict)")
        return payload

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


def ledger_check(line: str) -> str:
    """The check a ledger record carries (its last field, ``check``): the first 16 hex digits
    of the sha256 of its line without it. A line torn by a kill is not JSON, or lacks its line
    end; a changed byte (a flipped bit in a metric) breaks the check: neither reads as a
    record."""
    return hashlib.sha256(line.encode()).hexdigest()[:16]


def read_ledger(path: Path) -> dict[str, dict[str, Any]]:
    """A ledger file (``runs.jsonl``): key → record. A line that is not a whole record (torn by
    a kill: no line end, not JSON; or failing its ``check``) is left out, with a warning naming
    the file and line, and that run is trained again; a record of a ledger written before the
    check existed has none and is read as it is."""
    done: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return done
    for i, line in enumerate(path.read_bytes().decode(errors="replace").split("\n"), 1):
        if not line:
            continue  # the end of the file after its last line end (or a blank line)
        rec = _ledger_record(line)
        if rec is None:
            log.warning("%s line %d: not a whole ledger record (torn by a kill or changed); "
                        "left out: that run is trained again", path, i)
            continue
        done[rec.pop("key")] = rec
    return done


def _ledger_record(line: str) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
        return None
    check = rec.pop("check", None)
    if check is not None and check != ledger_check(json.dumps(rec)):
        return None
    return rec


def read_csv(path: Path) -> pd.DataFrame:
    """A CSV of the run directory; empty, unreadable or torn (a row with another number of
    fields than the header, or a last row without its line end: the file was cut) is a
    ConfigError naming it (and the line)."""
    check_whole_rows(path)
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        msg = " ".join(str(e).split())
        raise ConfigError(f"{path}: not a readable CSV: {msg}") from None


def check_whole_rows(path: Path) -> None:
    """Every row of the CSV at ``path`` is whole: as many fields as the header, and a line end
    after the last (the run directory's CSVs are written whole, so a row that is not was cut
    or damaged after: pandas would read its missing fields as empty values)."""
    try:
        text = path.read_text()
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a readable CSV: {e}") from None
    if not text:
        return
    rows = csv.reader(io.StringIO(text))
    header = next(rows, [])
    for row in rows:
        if row and len(row) != len(header):
            raise ConfigError(f"{path} line {rows.line_num}: torn row: {len(row)} fields, the "
                              f"header has {len(header)} (the file was cut or changed after "
                              "it was written)")
    if not text.endswith("\n"):
        raise ConfigError(f"{path} line {rows.line_num}: torn row: the file ends inside it, "
                          "without its line end (the file was cut after it was written)")


def _truthy(value: Any, path: Path) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "1.0", "yes", "y"):
        return True
    if text in ("false", "0", "0.0", "no", "n", "", "nan"):
        return False
    raise ConfigError(f"{path}: column 'chosen': expected true/false, got {value!r}")
