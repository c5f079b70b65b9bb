"""Experiment trackers: ``gemkd run --logger tensorboard|mlflow`` logs the teacher fit and every
student run (tagged with phase, variant, seed, lag and the tuned knobs) and the results once;
the tests read the written TensorBoard event files and the local MLflow file store back.
``teacher fit --logger`` does the same for one fit; a missing extra is one error line."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest
import yaml

from gemkd.experiments.cli import main
from tests.faults.conftest import ROOT, SPEC

TRACKED = {**SPEC, "name": "tracked", "batch_size": 32,  # enough steps to log train/loss
           "teacher": {**SPEC["teacher"], "overrides": {**SPEC["teacher"].get("overrides", {}),
                                                        "log_every_n_steps": 4}},
           "tuning": {"knobs": {"kd_weight": [1.0, 2.0], "temperature": [1.0], "lr": [0.01]}}}
#: a validation run's name ends with its knobs (seed 1000: final seed 0's own search)
TUNE_NAME = "lr=0.01,temperature=1.0"


def run(tmp_path: Path, capsys, logger: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(TRACKED))
    out = tmp_path / "run"
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["run", str(spec), "--out", str(out), "--threads", "1", "--logger", logger])
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert err == "", err[-3000:]  # tracking adds no noise either
    assert not [w for w in caught if "gemkd" in str(w.filename) or "lightning" in w.filename], \
        [str(w.message) for w in caught]
    return out


def test_tensorboard_event_files(tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="gemkd[tensorboard] is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = run(tmp_path, capsys, "tensorboard")
    root = out / "logs" / "tensorboard" / "tracked"
    names = sorted(p.name for p in root.iterdir())
    assert names == ["final-baseline-seed0-lag0", "final-kd-seed0-lag0", "results",
                     "teacher-lag0", f"tune-kd-seed1000-lag0-kd_weight=1.0,{TUNE_NAME}",
                     f"tune-kd-seed1000-lag0-kd_weight=2.0,{TUNE_NAME}"], names

    def scalars(name: str) -> dict[str, list[float]]:
        acc = EventAccumulator(str(root / name)).Reload()
        return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}

    kd = scalars("final-kd-seed0-lag0")
    assert "train/loss" in kd and len(kd["test/ne/click/all"]) == 1
    hparams = yaml.safe_load((root / "final-kd-seed0-lag0" / "hparams.yaml").read_text())
    assert {k: hparams[k] for k in ("phase", "variant", "seed", "lag")} == {
        "phase": "final", "variant": "kd", "seed": 0, "lag": 0}
    assert hparams["kd_weight"] in (1.0, 2.0)
    assert "train/loss" in scalars("teacher-lag0")
    results = scalars("results")
    assert set(results) >= {"ne/click/baseline", "ne/click/kd", "delta_ne/click/kd"}
    assert abs(results["ne/click/kd"][0] - kd["test/ne/click/all"][0]) < 1e-6
    text = EventAccumulator(str(root / "results")).Reload().Tags()["tensors"]
    assert any("results.csv" in t for t in text), text


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_mlflow_file_store(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow", reason="gemkd[mlflow] is not installed")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = run(tmp_path, capsys, "mlflow")
    client = MlflowClient(tracking_uri=(out / "logs" / "mlruns").as_uri())
    exp = client.get_experiment_by_name("tracked")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {"final-baseline-seed0-lag0", "final-kd-seed0-lag0", "results",
                         "teacher-lag0", f"tune-kd-seed1000-lag0-kd_weight=1.0,{TUNE_NAME}",
                         f"tune-kd-seed1000-lag0-kd_weight=2.0,{TUNE_NAME}"}
    kd = runs["final-kd-seed0-lag0"].data
    assert {k: kd.tags[k] for k in ("phase", "variant", "seed", "lag")} == {
        "phase": "final", "variant": "kd", "seed": "0", "lag": "0"}
    assert kd.params["kd_weight"] in ("1.0", "2.0") and "test/ne/click/all" in kd.metrics
    assert "train/loss" in runs["teacher-lag0"].data.metrics
    res = runs["results"]
    assert abs(res.data.metrics["ne/click/kd"] - kd.metrics["test/ne/click/all"]) < 1e-6
    artifacts = {a.path for a in client.list_artifacts(res.info.run_id)}
    assert artifacts == {"results.csv", "tuning.csv"}


def test_teacher_fit_tensorboard(tiny_data, tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="gemkd[tensorboard] is not installed")
    config = tmp_path / "tiny.yaml"
    values = yaml.safe_load((ROOT / "experiments/teacher/configs/tiny.yaml").read_text())
    config.write_text(yaml.safe_dump({**values, "max_steps": 12, "log_every_n_steps": 4}))
    out = tmp_path / "fit"
    assert main(["teacher", "fit", "--config", str(config), "--data", str(tiny_data), "--out",
                 str(out), "--logger", "tensorboard"]) == 0
    logs = out / "logs" / "tensorboard" / "gem-tiny" / "teacher"
    assert list(logs.glob("events.*")) and (out / "metrics.csv").is_file()  # CSV record stays
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logs)).Reload()
    assert len(acc.Scalars("train/loss")) == 3 and "val/ne/click/all" in acc.Tags()["scalars"]


def test_missing_extra_is_one_error_line(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(TRACKED))
    capsys.readouterr()
    assert main(["run", str(spec), "--out", str(tmp_path / "run"), "--logger", "mlflow"]) == 2
    assert capsys.readouterr().err == ("error: logger mlflow: the mlflow package is not "
                                       "installed; pip install 'gemkd[mlflow]'\n")
    assert not (tmp_path / "run").exists()
