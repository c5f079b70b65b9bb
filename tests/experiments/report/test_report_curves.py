"""training_curves.png shows the teacher fit's validation NE by epoch beside the students' losses
when the fit had a validation day (teacher_fit.json): a final student run has no validation, so
the plot showed training losses only, and a teacher that memorised ids in its second epoch did
not show."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gemkd.experiments.report import plots, write_plots
from tests.experiments.report.test_report import make_results, make_run

TEACHER_TITLE = "teacher (GEM) fit: validation NE by epoch (○ kept)"


def _fit(curve: list[dict], chosen: int | None) -> dict:
    return {"config": "gem-small", "train_days": [0, 4], "val_days": [4, 5] if curve else None,
            "max_epochs": 2, "select": "best", "epochs_trained": 2, "chosen_epoch": chosen,
            "checkpoint": "best.ckpt", "val_curve": curve, "val": {}}


@pytest.fixture
def figures(monkeypatch) -> dict:
    kept: dict = {}

    def keep(fig, path):
        kept[path.name] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    return kept


def _axes(figures: dict) -> dict:
    return {ax.get_title(): ax for ax in figures["training_curves.png"].axes if ax.axison}


def test_the_teacher_fit_s_validation_ne_is_drawn_with_its_kept_epoch(tmp_path, figures):
    run = make_run(tmp_path / "r", make_results())
    curve = [{"epoch": 1, "loss": 1.03, "ne": {"click": 0.7572, "conversion": 0.8188}},
             {"epoch": 2, "loss": 1.18, "ne": {"click": 0.8461, "conversion": 0.9497}}]
    (run / "teacher_fit.json").write_text(json.dumps({"0": {"0": _fit(curve, 1)},
                                                      "1": {"7": _fit(curve, 2)}}))
    write_plots(run)
    axes = _axes(figures)
    assert "baseline: train_loss (its own objective)" in axes  # the students' losses stay
    ax = axes[TEACHER_TITLE]
    lines = {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}
    assert sorted(lines) == ["click", "conversion"]  # lag 0's fit only (world 0)
    np.testing.assert_allclose(lines["click"].get_ydata(), [0.7572, 0.8461])
    np.testing.assert_allclose(lines["conversion"].get_xdata(), [1, 2])
    circles = [ln for ln in ax.lines if ln.get_label().startswith("_")]
    assert sorted(float(c.get_ydata()[0]) for c in circles) == [0.7572, 0.8188]  # epoch 1 kept


def test_no_teacher_axis_without_a_validation_day(tmp_path, figures):
    run = make_run(tmp_path / "r", make_results())
    (run / "teacher_fit.json").write_text(json.dumps({"0": {"0": _fit([], 2)}}))
    write_plots(run)
    assert TEACHER_TITLE not in _axes(figures)
    assert "kd: train_loss (its own objective)" in _axes(figures)
