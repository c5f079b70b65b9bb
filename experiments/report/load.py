"""Reading a run directory: ``results.csv`` (validated), ``tuning.csv``, ``curves/*.csv`` and
``spec.yaml`` (and ``environment.json``'s thread counts); any problem is a one-line ConfigError
naming the file, column and row."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gemkd.experiments.spec.model import BUILTIN_VARIANTS
from gemkd.transfer.config import load_yaml
from gemkd.transfer.errors import ConfigError

log = logging.getLogger(__name__)


#: Canonical order of the variants: the built-in ones' (DESIGN §6.1); unknown variants follow,
#: sorted by name.
VARIANTS: tuple[str, ...] = tuple(BUILTIN_VARIANTS)
KEYS: tuple[str, ...] = ("teacher_lag_days", "variant", "domain", "task")
#: Columns ``results.csv`` must have (``train_seconds``/``examples_per_second`` are optional).
REQUIRED_COLUMNS: tuple[str, ...] = (
    "variant", "seed", "domain", "task", "teacher_lag_days", "ne", "auc", "calibration",
    "ne_baseline", "ne_teacher", "ne_oracle", "delta_ne", "transfer_ratio", "efficiency_vs_kd",
)
#: Optional columns: parsed as numbers when present (older runs lack them). ``world`` is the
#: synthetic world's seed (0 for real data); a results.csv without it is one world, 0.
OPTIONAL_NUMERIC: tuple[str, ...] = ("ne_source", "ne_feature_oracle", "world")
WORLD = "world"
NUMERIC_COLUMNS: tuple[str, ...] = (
    "seed", "teacher_lag_days", "ne", "auc", "calibration", "ne_baseline", "ne_teacher",
    "ne_oracle", "delta_ne", "transfer_ratio", "efficiency_vs_kd",
)
#: Metrics summarised as ``<metric>_mean`` / ``<metric>_std`` by :func:`summarize`.
METRICS: tuple[str, ...] = (
    "ne", "delta_ne", "transfer_ratio", "efficiency_vs_kd", "gap_closed", "auc", "calibration",
    "ne_baseline", "ne_teacher", "ne_oracle", "ne_source", "ne_feature_oracle",
)
#: Columns of newer runs; an older results.csv without them reads as NaN.
OPTIONAL_METRICS: tuple[str, ...] = ("ne_source", "ne_feature_oracle")
TUNING_COLUMNS: tuple[str, ...] = ("variant", "param", "value", "chosen", "val_ne")
CURVE_METRICS: tuple[str, ...] = ("train_loss", "kd_loss", "val_ne")
PLOT_NAMES: tuple[str, ...] = (
    "ne_by_variant.png", "transfer_ratio.png", "ne_vs_lag.png", "training_curves.png",
)
ALL = "all"
FIRST_TASK = "click"
_CURVE_NAME = re.compile(r"^(?P<variant>.+)_seed(?P<seed>-?\d+)_lag(?P<lag>-?\d+(?:\.\d+)?)"
                         r"(?:_w(?P<world>-?\d+))?$")  # _w<world>: a run over several worlds



def load_results(run_dir: str | Path) -> pd.DataFrame:
    """Read and validate ``run_dir/results.csv``; any problem is a one-line ConfigError."""
    path = Path(run_dir) / "results.csv"
    if not path.is_file():
        raise ConfigError(f"{path}: results file not found (run `gemkd run` first)")
    frame = read_csv(path)
    return validate_results(frame, str(path))


def read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        msg = " ".join(str(e).split())
        raise ConfigError(f"{path}: not a readable CSV: {msg}") from None


def validate_results(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"{source}: missing column {missing[0]!r}"
            + (f" (and {', '.join(map(repr, missing[1:]))})" if missing[1:] else "")
            + f"; expected columns: {', '.join(REQUIRED_COLUMNS)}"
        )
    if frame.empty:
        raise ConfigError(f"{source}: no rows")
    out = frame.copy()
    for col in NUMERIC_COLUMNS + tuple(c for c in OPTIONAL_NUMERIC if c in out.columns):
        raw = out[col]
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna() & raw.notna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ConfigError(
                f"{source}: column {col!r} row {i + 1}: expected a number, got {raw.iloc[i]!r}"
            )
        out[col] = num.astype(float)
    for col in ("variant", "seed", "domain", "task", "teacher_lag_days"):
        empty = out[col].isna()
        if empty.any():
            i = int(np.flatnonzero(empty.to_numpy())[0])
            raise ConfigError(f"{source}: column {col!r} row {i + 1}: empty value")
    for col in ("variant", "domain", "task"):
        out[col] = out[col].astype(str)
    out["seed"] = out["seed"].astype(int)
    out[WORLD] = _worlds(out, source)
    lags = out["teacher_lag_days"]
    if (lags == lags.round()).all():
        out["teacher_lag_days"] = lags.astype(int)
    dup = out.duplicated(subset=[*KEYS, WORLD, "seed"])
    if dup.any():
        r = out[dup].iloc[0]
        raise ConfigError(
            f"{source}: duplicate row for variant={r['variant']} seed={r['seed']} "
            f"domain={r['domain']} task={r['task']} teacher_lag_days={r['teacher_lag_days']} "
            f"world={r[WORLD]}"
        )
    return out


def _worlds(frame: pd.DataFrame, source: str) -> pd.Series:
    """The ``world`` column as ints; 0 (one world) where an older results.csv has none."""
    if WORLD not in frame.columns:
        return pd.Series(0, index=frame.index, dtype=int)
    world = frame[WORLD]
    bad = world.isna() | (world != world.round())
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ConfigError(f"{source}: column {WORLD!r} row {i + 1}: expected an integer world "
                          f"seed, got {world.iloc[i]!r}")
    return world.astype(int)


def load_spec(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "spec.yaml"
    return load_yaml(path) if path.is_file() else None


def load_tuning(run_dir: str | Path) -> pd.DataFrame | None:
    """``run_dir/tuning.csv`` validated, or None when the run has none."""
    path = Path(run_dir) / "tuning.csv"
    if not path.is_file():
        return None
    frame = read_csv(path)
    missing = [c for c in TUNING_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: missing column {missing[0]!r}; expected columns: "
                          f"{', '.join(TUNING_COLUMNS)}")
    out = frame.copy()
    out["chosen"] = [_truthy(v, path) for v in out["chosen"]]
    out["val_ne"] = pd.to_numeric(out["val_ne"], errors="coerce")
    out["variant"] = out["variant"].astype(str)
    out["param"] = out["param"].astype(str)
    return out


def tuning_digest(run_dir: str | Path) -> str | None:
    """sha256 of ``run_dir/tuning.csv`` (None without one): what a tool that reuses a run's
    chosen knobs (``benchmarks/adapter_probe.py``) records, so a report can tell whether those
    are still the run's choices."""
    path = Path(run_dir) / "tuning.csv"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _truthy(value: Any, path: Path) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "1.0", "yes", "y"):
        return True
    if text in ("false", "0", "0.0", "no", "n", "", "nan"):
        return False
    raise ConfigError(f"{path}: column 'chosen': expected true/false, got {value!r}")


def load_curves(run_dir: str | Path) -> pd.DataFrame | None:
    """All ``curves/*.csv`` stacked with ``variant, seed, teacher_lag_days`` columns, or None."""
    cdir = Path(run_dir) / "curves"
    if not cdir.is_dir():
        return None
    parts = []
    for path in sorted(cdir.glob("*.csv")):
        m = _CURVE_NAME.match(path.stem)
        if m is None:
            log.warning("%s: name is not <variant>_seed<k>_lag<l>[_w<world>].csv; skipped",
                        path)
            continue
        frame = read_csv(path)
        for col in ("step", "train_loss"):
            if col not in frame.columns:
                raise ConfigError(f"{path}: missing column {col!r}; expected step, train_loss "
                                  "[, kd_loss, val_ne]")
        keep = [c for c in ("step", *CURVE_METRICS) if c in frame.columns]
        frame = frame[keep].apply(pd.to_numeric, errors="coerce")
        frame["variant"] = m["variant"]
        frame["seed"] = int(m["seed"])
        frame[WORLD] = int(m["world"]) if m["world"] is not None else 0
        lag = float(m["lag"])
        frame["teacher_lag_days"] = int(lag) if lag.is_integer() else lag
        parts.append(frame)
    if not parts:
        return None
    return pd.concat(parts, ignore_index=True)


def threads_text(run_dir: str | Path) -> str:
    """The torch thread counts a run was made at (``environment.json``), as a sentence: its
    numbers reproduce only at the same counts (torch's CPU sums depend on them, and a search
    amplifies the difference). Empty for a run without the file."""
    path = Path(run_dir) / "environment.json"
    if not path.is_file():
        return ""
    env = json.loads(path.read_text())
    if "threads" not in env:
        return ""
    steps, runs = env["threads"], env.get("run_threads")
    made = (f"Made at {steps} torch thread(s) in the command's process (teacher, store, domain "
            "FM, codes) and " + (f"{runs} in each student run" if runs is not None else
                                 "an unrecorded count in the student runs"))
    again = f"; `--threads {steps}` reproduces it" if runs == steps else ""
    return (f"{made}: another count gives other last digits and can move a search's choices "
            f"(README, Reproducing a table){again}.")
