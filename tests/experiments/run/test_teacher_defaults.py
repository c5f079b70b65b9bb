"""The teacher a spec gets when it names only a config (README's own-log template:
``teacher: {config: small}``): trap 1 of the second real log trained small's 2 epochs with no
validation day, the second memorised the ids (validation NE 0.98 → 1.20) and voided the run.
By default a config of several epochs now holds the window's last day out, keeps the epoch with
the best validation loss and stops at the first worse one; the fit's curve and kept epoch are in
``teacher_fit.json``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.run.preflight import plan_run
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.experiments.teacher.teacher_curve import fit_entry, summary_line

TEMPLATE = {"name": "mine", "teacher": {"config": "small"}, "teacher_days": 9,
            "student_days": [9, 12], "eval_days": [12, 14]}


@pytest.mark.parametrize("keys, held, select", [
    ({}, 1, "best"),  # small trains 2 epochs: one day chooses between them
    # one pass (quickstart)
    ({"teacher": {"config": "small", "overrides": {"max_epochs": 1}}}, 0, "last"),
    ({"teacher": {"config": "tiny"}}, 0, "last"),  # tiny: max_epochs 1
    ({"teacher_val_days": 0}, 0, "last"),  # asked for: no validation
    ({"teacher_val_days": 2}, 2, "best"),
    ({"teacher_window_days": 1}, 0, "last"),  # no day to spare
    ({"teacher_protocol": "streaming"}, 0, "last"),
])
def test_a_config_of_several_epochs_holds_a_validation_day_out(keys, held, select):
    spec = spec_from_mapping({**TEMPLATE, **keys})
    plan = plan_run(spec)
    assert plan.val_days == held
    cfg = plan.teachers[0]
    end = 9
    assert cfg.val_days == ([end - held, end] if held else None)
    assert cfg.train_days[1] == end - held and cfg.select == select
    assert plan.seen[0][1] == (end if keys.get("teacher_protocol") else end - held)
    if held and "teacher_val_days" not in keys:
        assert cfg.patience == 1  # stops at the first worse epoch


def _fake_fit(run: Path, losses: list[float], best: int) -> None:
    """A fit's files as ``fit_teacher`` writes them: a validation round per epoch, then the
    final validation of the kept epoch (logged with epoch == epochs trained)."""
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({
        "name": "gem-small", "train_days": [0, 8], "val_days": [8, 9], "max_epochs": 3,
        "select": "best"}))
    rows = [{"epoch": e, "step": 10 * (e + 1), "train/loss": 0.9}
            for e in range(len(losses))]
    rows += [{"epoch": e, "step": 10 * (e + 1), "val/loss": v, "val/ne/click/all": v + 0.2,
              "val/auc/click/all": 0.7, "val/calibration/click/all": 1.1}
             for e, v in enumerate(losses)]
    rows.append({"epoch": len(losses), "step": 10 * len(losses), "val/loss": losses[best - 1],
                 "val/ne/click/all": losses[best - 1] + 0.2})
    pd.DataFrame(rows).to_csv(run / "metrics.csv", index=False)
    (run / "val_metrics.json").write_text(json.dumps({
        "epochs": len(losses), "best_epoch": best,
        "val": {"ne/click/all": losses[best - 1] + 0.2, "auc/click/all": 0.7,
                "calibration/click/all": 1.1, "ne/click/feed": 0.5}}))


def test_the_curve_and_the_kept_epoch_are_recorded(tmp_path):
    run = tmp_path / "fit"
    _fake_fit(run, [0.80, 0.85], best=1)
    entry = fit_entry(run / "checkpoints" / "best.ckpt")
    assert entry["chosen_epoch"] == 1 and entry["epochs_trained"] == 2
    assert [p["epoch"] for p in entry["val_curve"]] == [1, 2]
    assert [p["loss"] for p in entry["val_curve"]] == [0.80, 0.85]
    assert entry["val_curve"][1]["ne"] == {"click": pytest.approx(1.05)}
    assert entry["val_curve"][0]["calibration"] == {"click": 1.1}
    assert entry["val"] == {"ne": {"click": pytest.approx(1.0)}, "auc": {"click": 0.7},
                            "calibration": {"click": 1.1}}
    assert entry["val_days"] == [8, 9]
    assert summary_line(entry) == ("  teacher fit: epoch 1 of 2 kept (validation NE epoch 1: "
                                   "click 1.0000; epoch 2: click 1.0500)")
    out = tmp_path / "run"
    out.mkdir()
    RunDir(out).record_teacher_fit(3, 0, entry)
    RunDir(out).record_teacher_fit(3, 2, entry)
    assert RunDir(out).teacher_fit()["3"]["0"] == entry
    assert sorted(RunDir(out).teacher_fit()["3"]) == ["0", "2"]


T0 = 1_714_000_000  # 2024-04-24 23:06 UTC


def raw_id_log(folder: Path, n: int = 6000, days: int = 9, users: int = 2000) -> None:
    """An e-commerce event log as a new user brings one: raw 10-digit user and item ids, many
    users of few rows each (what an id table memorises in a second epoch), two tasks (engage:
    not a page view; buy), calendar days with a few stray rows two months before the rest."""
    rng = np.random.default_rng(7)
    ts = np.sort(T0 + rng.integers(0, days * 86400, n))
    ts[:5] = T0 - 60 * 86400 + np.arange(5)  # stragglers: day 0, the real days 60..68
    user = 4_000_000_000 + rng.integers(0, users, n) * 7919
    item = 9_100_000_000 + rng.integers(0, 400, n) * 104729
    taste = ((item // 104729) % 5 - 2) * 0.5
    engage = rng.random(n) < 1 / (1 + np.exp(-(taste - 1.0)))
    buy = engage & (rng.random(n) < 0.25)
    event = np.where(buy, "purchase", np.where(engage, "cart", "view"))
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"t": ts, "visitor": user, "product": item, "event": event,
                  "device": rng.choice(["app", "web"], n)}).to_csv(folder / "log.csv",
                                                                    index=False)
    (folder / "mapping.yaml").write_text(yaml.safe_dump({
        "source": "shop", "time": {"column": "t", "unit": "s"}, "user": "visitor",
        "item": "product", "categorical": ["device"], "history": {"max_events": 20},
        "labels": {"engage": {"column": "event", "op": "!=", "value": "view"},
                   "buy": {"column": "event", "op": "==", "value": "purchase"}}}))


@pytest.mark.slow  # a small GEM for two epochs, then two students: ~1-2 minutes on 1 thread
def test_readme_template_on_a_raw_id_log_keeps_the_best_epoch(tmp_path):
    from tests.faults.conftest import gemkd_run

    raw_id_log(tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "mine", "seeds": [0],
        "data": {"source": "import", "src": "log.csv", "overrides": {"mapping": "mapping.yaml"}},
        "teacher": {"config": "small", "overrides": {"max_seq_len": 20}},  # README's template
        "teacher_days": 65, "teacher_window_days": 5,  # stray day 0 is outside the window
        "student_days": [65, 67], "eval_days": [67, 69], "student_tasks": ["engage", "buy"],
        "variants": ["baseline", "kd"], "batch_size": 128,
        "tuning": {"knobs": {"kd_weight": [1.0], "temperature": [1.0], "lr": [0.01]}}}))
    out = tmp_path / "out"
    assert gemkd_run(spec, out) == 0
    fits = RunDir(out).teacher_fit()
    (entry,) = [lag for world in fits.values() for lag in world.values()]
    assert entry["train_days"] == [60, 64] and entry["val_days"] == [64, 65]
    losses = [p["loss"] for p in entry["val_curve"]]
    assert len(losses) == entry["epochs_trained"] >= 1
    # the teacher kept is its best epoch, never a later, worse one
    assert entry["chosen_epoch"] == 1 + int(np.argmin(losses))
    assert summary_line(entry) in (out / "log.txt").read_text()
