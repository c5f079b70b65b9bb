"""Shared tiny fixtures of the fault tests: one small ``gemkd run`` reused as the reference."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.data.dataset_writer import ROW_GROUP_SIZE
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.store import TeacherStore

# As small as a run with a teacher, a store and a KD student gets: 6 days x 1000 impressions,
# 8 teacher steps, two variants, one seed, no tuning grid (about 5 s here).
SPEC = {
    "name": "faults", "seeds": [0],
    "data": {"source": "synthetic", "preset": "tiny",
             "overrides": {"examples_per_day": 1000, "n_users": 500, "history_days": 5}},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 16, "max_steps": 8}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [8]}},
    "student_tasks": ["click"], "variants": ["baseline", "kd"],
    "tuning": {"knobs": {"kd_weight": [1.0], "temperature": [1.0], "lr": [0.01]}},
}
ROOT = Path(__file__).resolve().parents[2]
TIMING = ["train_seconds", "examples_per_second"]
RESULT_FILES = ("results.csv", "runs.jsonl", "tuning.csv", "report.md")


@dataclass(frozen=True)
class TinyRun:
    """A finished run and the paths its cached steps hold."""

    spec: Path
    out: Path

    def step(self, name: str) -> Path:
        (found,) = self.out.glob(f"cache/{name}-*")
        return found

    @property
    def data(self) -> Path:
        return self.step("data") / "data"

    @property
    def ckpt(self) -> Path:
        return self.step("teacher") / "run" / "checkpoints" / "last.ckpt"

    @property
    def store(self) -> Path:
        return self.step("store") / "store"


def gemkd_run(spec: Path, out: Path) -> int:
    """``gemkd run`` in this process on one thread (what the reference run used)."""
    return main(["run", str(spec), "--out", str(out), "--threads", "1"])


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models on shared cores: one intra-op thread, and the same float results everywhere
    (the reference run, reruns in this process, forked children)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> TinyRun:
    """The uninterrupted reference run; tests copy it before changing anything in it."""
    n = torch.get_num_threads()
    tmp = tmp_path_factory.mktemp("faults-run")
    spec = tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    try:
        assert gemkd_run(spec, tmp / "out") == 0
    finally:
        torch.set_num_threads(n)  # `gemkd run --threads 1` sets it for the whole process
    return TinyRun(spec, tmp / "out")


def results(out: Path) -> pd.DataFrame:
    """``results.csv`` without its wall-clock columns, in a stable row order."""
    df = pd.read_csv(out / "results.csv").drop(columns=TIMING)
    return df.sort_values(["variant", "seed", "domain", "task"]).reset_index(drop=True)


def snapshot(out: Path) -> dict[str, bytes | list[str]]:
    """What a failed rerun must leave untouched: the result files and the finished steps."""
    snap: dict[str, bytes | list[str]] = {
        name: (out / name).read_bytes() for name in RESULT_FILES if (out / name).exists()}
    snap["steps"] = sorted(p.parent.name for p in out.glob("cache/*/DONE"))
    snap["cache"] = sorted(p.name for p in (out / "cache").iterdir())
    return snap


def error_line(stderr: str) -> str:
    """The one ``error: ...`` line a failed command prints, last on stderr, with no traceback
    (Lightning's own start-up lines may come before it)."""
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    return errors[0]


def cli_error(capsys: pytest.CaptureFixture, *argv: str) -> str:
    """Run ``gemkd argv`` in this process expecting exit code 2 and its one error line."""
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    return error_line(err)


def manifest(store: Path) -> dict:
    """``manifest.json`` without its creation time: equal for two exports of the same rows."""
    m = json.loads((store / "manifest.json").read_text())
    m.pop("created_at")
    return m


def export_argv(run: TinyRun, out: Path, *extra: str) -> list[str]:
    """The export the run's store step made (same checkpoint, data and batch size), to ``out``."""
    return ["teacher", "export", "--ckpt", str(run.ckpt), "--data", str(run.data), "--out",
            str(out), "--no-progress", *extra]


def assert_same_store(store: Path, reference: Path) -> None:
    """``store`` loads (shards verified) and holds exactly the reference rows, each once."""
    loaded = TeacherStore(store)
    assert manifest(store) == manifest(reference)  # same shards, rows and sha256s
    ids = loaded.read(columns=["example_id"]).column(0).to_numpy()
    expect = np.concatenate([pq.read_table(p, columns=["example_id"]).column(0).to_numpy()
                             for p in sorted(reference.glob("*.parquet"))])
    assert len(np.unique(ids)) == len(ids) == loaded.num_rows
    np.testing.assert_array_equal(np.sort(ids), np.sort(expect))


def repeat_example_id(data: Path) -> tuple[int, Path]:
    """Write day 3's row-7 ``example_id`` over day 4's row 10 and record the parts' digests
    again, as a writer that repeated the id would: returns (the id, day 4's part)."""
    first = pq.read_table(data / "day=3" / "part-0.parquet", columns=["example_id"])
    repeated = first.column(0)[7].as_py()
    path = data / "day=4" / "part-0.parquet"
    table = pq.read_table(path)
    ids = table.column("example_id").to_numpy().copy()
    ids[10] = repeated
    table = table.set_column(table.schema.get_field_index("example_id"), "example_id",
                             pa.array(ids))
    pq.write_table(table, path, row_group_size=ROW_GROUP_SIZE, compression="snappy")
    DatasetSchema.load(data).save(data)
    return repeated, path
