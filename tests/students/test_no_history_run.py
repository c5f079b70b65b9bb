"""The user's path end to end: a log imported without a ``history`` mapping, then ``gemkd run``
with the shipped tiny teacher and domain-FM configs (both say ``use_sequence: true``), the
default student and every built-in variant (KD, auxiliary head, adapter, LoopFM codes,
hierarchical)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from gemkd.experiments.cli import main
from gemkd.experiments.spec.run_spec import DEFAULT_VARIANTS
from gemkd.transfer.data.schema import DatasetSchema

ROWS, DAYS = 3000, 6


def write_log(folder: Path) -> tuple[Path, Path]:
    """A click log whose label depends on item and surface, and its mapping (no ``history``)."""
    rng = np.random.default_rng(0)
    item = rng.integers(0, 60, ROWS)
    surface = rng.choice(["feed", "stories"], ROWS)
    logit = -1.0 + 2.0 * (item % 3 == 0) - 0.5 * (surface == "stories")
    log = pd.DataFrame({
        "t": 1_700_000_000 + np.sort(rng.integers(0, DAYS * 86_400, ROWS)),
        "user": rng.integers(0, 300, ROWS),
        "item": item, "surface": surface, "price": rng.exponential(3.0, ROWS),
        "clicked": (rng.random(ROWS) < 1 / (1 + np.exp(-logit))).astype(int)})
    folder.mkdir(parents=True)
    log.to_csv(folder / "log.csv", index=False)
    mapping = {"source": "nohist", "time": {"column": "t", "unit": "s"},
               "days": {"buckets": DAYS}, "user": "user", "item": "item",
               "domain": {"column": "surface"}, "labels": {"click": "clicked"},
               "dense": ["price"]}
    (folder / "map.yaml").write_text(yaml.safe_dump(mapping))
    return folder / "log.csv", folder / "map.yaml"


def test_run_on_a_log_without_histories(tmp_path):
    src, mapping = write_log(tmp_path / "src")
    data = tmp_path / "data"
    assert main(["data", "import", "--src", str(src), "--mapping", str(mapping),
                 "--out", str(data)]) == 0
    assert DatasetSchema.load(data).sequence == []
    spec = {"name": "nohist", "seeds": [0], "data": {"source": "dataset", "src": str(data)},
            # tiny says use_sequence: true
            "teacher": {"config": "tiny", "overrides": {"max_steps": 20}},
            "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6],
            "student_tasks": ["click"], "hierarchical": {"config": "domain_fm",
                                                         "overrides": {"max_steps": 20}},
            "tuning": {"knobs": {"kd_weight": [1.0], "temperature": [1.0], "aux_beta": [1.0],
                                 "adapter_hidden": [8], "lr": [0.01]}},
            "repr": {"code_dim": 4, "epochs": 1, "max_events": 10}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "out")]) == 0
    df = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(df["variant"]) == set(DEFAULT_VARIANTS)  # the spec names none
    assert np.isfinite(df["ne"]).all() and np.isfinite(df["ne_teacher"]).all()
