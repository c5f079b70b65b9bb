"""A damaged or outdated data directory given to the commands that consume one: one ``error:``
line naming the file, exit code 2, and no run directory or store left behind.

``gemkd data validate`` on damaged Parquet is covered in tests/transfer/data/test_bad_input.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.faults.conftest import ROOT, TinyRun, cli_error


@pytest.fixture
def data(tiny_run: TinyRun, tmp_path: Path) -> Path:
    dst = tmp_path / "data"
    shutil.copytree(tiny_run.data, dst)
    return dst


def truncate(path: Path) -> None:
    """Keep the first half of a file: the Parquet footer (its schema and row groups) is gone."""
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def outdate(data: Path) -> None:
    """Mark the dataset as written by an older format version."""
    path = data / "schema.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 0}))


def consumers(run: TinyRun, data: Path, out: Path) -> dict[str, list[str]]:
    """Each command that reads a data directory, writing to ``out``."""
    return {
        "fit": ["teacher", "fit", "--config", str(ROOT / "experiments/teacher/configs/tiny.yaml"),
                "--data", str(data), "--out", str(out), "--no-progress"],
        "export": ["teacher", "export", "--ckpt", str(run.ckpt), "--data", str(data), "--out",
                   str(out), "--no-progress"],
    }


@pytest.mark.parametrize("command", ["fit", "export"])
@pytest.mark.parametrize("damage", ["truncated", "old-schema"])
def test_bad_data_dir_writes_nothing(tiny_run, data, tmp_path, capsys, command, damage):
    # day 5 is read only late by `teacher fit` (validation days [4, 6)) and last by the export
    if damage == "truncated":
        bad = data / "day=5" / "part-0.parquet"
        truncate(bad)
        message = f"{bad}: not a readable Parquet file (Parquet magic bytes not found"
    else:
        outdate(data)
        message = (f"{data / 'schema.json'}: schema_version 0, this gemkd reads version 1; "
                   "regenerate the dataset")
    out = tmp_path / "out"
    err = cli_error(capsys, *consumers(tiny_run, data, out)[command])
    assert err.startswith(f"error: {message}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # no out, no hidden staging


def test_old_schema_refused_by_validate(data, capsys):
    outdate(data)
    err = cli_error(capsys, "data", "validate", str(data))
    assert err == (f"error: {data / 'schema.json'}: schema_version 0, this gemkd reads version "
                   "1; regenerate the dataset with this version")
