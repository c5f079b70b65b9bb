"""Plug-ins from outside the packages, end to end (DESIGN §5.1): a transfer method, a teacher
and an imported teacher store, each named in a spec and run by ``gemkd run`` on a tiny world."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.store import TeacherStore
from tests.faults.conftest import SPEC

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
# the fault tests' tiny spec with a little more data and teacher steps; variants per test
BASE = {k: v for k, v in SPEC.items() if k != "variants"} | {
    "name": "plugins", "data": {**SPEC["data"], "overrides": {**SPEC["data"].get("overrides", {}),
                                                              "examples_per_day": 1500}},
    "teacher": {**SPEC["teacher"], "overrides": {**SPEC["teacher"].get("overrides", {}),
                                                 "max_steps": 10}}, "batch_size": 128,
    "tuning": {"knobs": {"kd_weight": [1.0], "lr": [0.01]}},
}


@pytest.fixture(autouse=True)
def _examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def run(tmp_path: Path, **spec) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**BASE, **spec}))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--threads", "1"]) == 0
    return out


def click_all(out: Path) -> pd.Series:
    df = pd.read_csv(out / "results.csv")
    return df[(df.domain == "all") & (df.task == "click")].set_index("variant")["ne"]


def test_a_method_from_outside_the_packages(tmp_path):
    """docs/examples/my_methods/embedding_kd.py named by its import path, composed with kd."""
    out = run(tmp_path, variants={
        "baseline": [], "kd": ["kd"],
        "mine": ["kd", "my_methods.embedding_kd.EmbeddingKD"]},
        tuning={"knobs": {"kd_weight": [1.0], "emb_weight": [0.5, 2.0], "lr": [0.01]}})
    ne = click_all(out)
    assert list(ne.index) == ["baseline", "kd", "mine"] and np.isfinite(ne).all()
    assert ne["mine"] != ne["kd"]  # the embedding loss changed the student
    tuning = pd.read_csv(out / "tuning.csv")
    mine = tuning[tuning.variant == "mine"]
    assert set(mine.param) == {"emb_weight", "kd_weight", "lr", "temperature"}
    assert sorted(set(mine[mine.param == "emb_weight"].value)) == [0.5, 2.0]  # 8 trials
    assert mine[mine.param == "emb_weight"].chosen.sum() == 1
    spec = yaml.safe_load((out / "spec.yaml").read_text())
    assert spec["variants"]["mine"] == ["kd", "my_methods.embedding_kd.EmbeddingKD"]
    assert "| mine " in (out / "report.md").read_text()


def doc_snippet(doc: Path, heading: str) -> str:
    """The first ``python`` block after ``heading`` in ``doc``."""
    return re.search(rf"{re.escape(heading)}\n.*?```python\n(.*?)```", doc.read_text(),
                     re.S).group(1)


@pytest.mark.parametrize("doc, heading", [("custom_method.md", "## 5. Check it"),
                                          ("custom_teacher.md", "### Optional hooks")])
def test_doc_check_snippets_run(monkeypatch, doc, heading):
    """The checks shown in docs/guides/custom_method.md and docs/guides/custom_teacher.md, as
    written, from the repository root: they use only the installed packages
    (``gemkd.transfer.testing``)."""
    path = ROOT / "docs" / "guides" / doc
    code = doc_snippet(path, heading)
    assert "tests." not in code
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the snippet's path entry goes away after
    exec(compile(code, str(path), "exec"), {"__name__": "__doc_snippet__"})


def test_a_teacher_from_outside_the_packages(tmp_path):
    """docs/examples/my_teachers/deep_tower.yaml (a YAML path): fit, export, codes, students."""
    config = EXAMPLES / "my_teachers" / "deep_tower.yaml"
    out = run(tmp_path, teacher={"config": str(config), "overrides": {"max_steps": 10}},
              variants=["baseline", "kd", "kd_repr"],
              repr={"code_dim": 4, "max_events": 10, "epochs": 1})
    (store_step,) = (out / "cache").glob("store-*")
    store = TeacherStore(store_step / "store")
    assert store.manifest.teacher_name == "deep-tower" and store.manifest.layer == "tower"
    assert store.emb_dim == 64
    ne = click_all(out)
    assert set(ne.index) == {"baseline", "kd", "kd_repr"} and np.isfinite(ne).all()


def test_an_imported_store_is_a_teacher(tmp_path):
    """Predictions logged outside gemkd → `gemkd store import` → `teacher: {store: ...}`."""
    first = run(tmp_path / "a", variants=["baseline"])
    data = next((first / "cache").glob("data-*")) / "data"
    ids, logits = [], []
    for day in range(6):  # an "external model": the world's own probabilities, as logits
        t = pq.read_table(data / f"day={day}" / "part-0.parquet",
                          columns=["example_id", "p_click", "p_conversion"])
        ids.append(t["example_id"].to_numpy())
        p = np.clip(t["p_click"].to_numpy(), 1e-6, 1 - 1e-6)
        logits.append(np.log(p) - np.log1p(-p))
    src = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"example_id": np.concatenate(ids),
                             "score": np.concatenate(logits).astype(np.float32)}), src)
    store = tmp_path / "store"
    assert main(["store", "import", "--src", str(src), "--out", str(store), "--tasks", "click",
                 "--logit-column", "click=score", "--data", str(data),
                 "--trained-until-day", "2"]) == 0
    imported = TeacherStore(store)
    assert imported.num_rows == sum(len(i) for i in ids) and imported.manifest.layer == "none"
    out = run(tmp_path / "b", teacher={"store": str(store)}, variants=["baseline", "kd"],
              # T = 1: the truth
              tuning={"knobs": {"kd_weight": [1.0], "temperature": [1.0], "lr": [0.01]}})
    ne = click_all(out)
    assert ne["kd"] < ne["baseline"]  # a teacher that knows the truth helps
    assert not list((out / "cache").glob("teacher-*"))  # nothing trained


def test_store_import_errors(tmp_path, capsys):
    src = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"example_id": [1, 2, 2], "logit_click": [0.1, 0.2, 0.3]}), src)
    args = ["store", "import", "--src", str(src), "--out", str(tmp_path / "s"), "--tasks",
            "click", "--trained-until-day", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "missing" not in err and "'day'" in err and "--data" in err  # keys: no columns, no data
    pq.write_table(pa.table({"example_id": [1, 2, 2], "logit_click": [0.1, 0.2, 0.3],
                             "day": [0, 0, 0], "domain": [0, 0, 0], "user_id": [1, 1, 1],
                             "ts": [5, 6, 7]}), src)
    assert main(args) == 2
    assert "example_id 2 appears 2 times" in capsys.readouterr().err
    assert main([*args[:-3], "conversion", "--trained-until-day", "0"]) == 2
    assert "column 'logit_conversion' missing" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_hierarchical_domain_fms_can_start_from_gem(tmp_path, capsys):
    """`hierarchical: {overrides: {init_from: gem}}`: each lag's domain FMs start from that lag's
    GEM checkpoint (same architecture); with an imported store there is no checkpoint to start
    from, which is one error before any work."""
    fm = {"config": "tiny", "overrides": {"max_seq_len": 16, "max_steps": 5, "init_from": "gem"}}
    out = run(tmp_path / "a", variants=["baseline", "hierarchical"], hierarchical=fm)
    (fm_step,) = (out / "cache").glob("domain_fm-*")
    key = json.loads((fm_step / "config.json").read_text())
    (teacher_step,) = (out / "cache").glob("teacher-*")
    # the GEM checkpoint by its step's name: the key does not depend on where the cache lives
    assert key["config"]["fm"]["init_from"].startswith(f"{teacher_step.name}/run/checkpoints/")
    assert set(click_all(out).index) == {"baseline", "hierarchical"}

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, "teacher": {"store": str(tmp_path / "none")},
                                    "variants": ["hierarchical"], "hierarchical": fm}))
    assert main(["run", str(path), "--out", str(tmp_path / "b")]) == 2
    assert "hierarchical.overrides.init_from: gem" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    path.write_text(yaml.safe_dump({**BASE, "variants": ["hierarchical"],
                                    "hierarchical": {**fm, "config": "domain_fm"}}))
    assert main(["run", str(path), "--out", str(tmp_path / "c")]) == 2
    assert "built as the teacher is (config 'domain_fm' vs 'tiny'" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
