""""What to try" under a teacher worse than the labels-only student suggests only what the run
did not already do (read from teacher_fit.json or the cached fits, and spec.yaml), and a smaller
teacher config with the ``hierarchical.config`` it needs under ``hierarchical.init_from: gem``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gemkd.experiments.report import render_report
from gemkd.experiments.report.teacher_try import smaller_config
from tests.experiments.report.cluster_run import make_cluster_run

ROOT = Path(__file__).resolve().parents[3]
BAD = {"baseline": 1.6, "kd": 0.9, "hierarchical": 1.0}


def _bad_run(root: Path, spec: dict, fit: dict | None) -> Path:
    """A one-world run whose teacher is worse than the labels-only student, its spec.yaml
    extended with ``spec`` and its teacher_fit.json holding ``fit`` (world 0, lag 0)."""
    run = make_cluster_run(root, worlds=(0,), users=150, teacher_noise=2.6, noise=BAD)
    written = yaml.safe_load((run / "spec.yaml").read_text())
    (run / "spec.yaml").write_text(yaml.safe_dump({**written, **spec}))
    if fit is not None:
        (run / "teacher_fit.json").write_text(json.dumps({"0": {"0": {
            "config": "gem-small", "train_days": [0, 4], "checkpoint": "best.ckpt",
            "val_curve": [], "val": {}, **fit}}}))
    return run


def _try(run: Path) -> str:
    section = render_report(run).split("## The teacher")[1].split("\n## ")[0]
    return next(ln for ln in section.splitlines() if "What to try" in ln)


FM_FROM_GEM = {"teacher": {"config": "small"},
               "hierarchical": {"config": "small", "overrides": {"init_from": "gem",
                                                                 "max_epochs": 2}}}


def test_what_is_in_effect_is_not_suggested_and_the_fm_coupling_is_named(tmp_path):
    """The new user's run: a validation day, select: best, epoch 1 of 2 kept, the template's
    hierarchical.init_from: gem."""
    run = _bad_run(tmp_path / "r", FM_FROM_GEM, {"val_days": [4, 5], "select": "best",
                                                  "max_epochs": 2, "epochs_trained": 2,
                                                  "chosen_epoch": 1})
    line = _try(run)
    assert line.startswith("Already in effect: a validation day with `select: best` (epoch 1 "
                           "of 2 kept). What to try: a smaller teacher config (`teacher: "
                           "{config: tiny}`; with this spec's `hierarchical.overrides.init_from: "
                           "gem` set `hierarchical: {config: tiny}` too")
    assert "teacher_val_days: 1" not in line and "max_epochs: 1" not in line


def test_the_suggested_configs_pass_the_check_that_one_alone_fails():
    """What the line says is what the run's own check needs: the teacher alone changed fails
    before training, with hierarchical.config changed too it passes."""
    from gemkd.experiments.run.preflight import check_warm_start, plan_run
    from gemkd.experiments.spec.load import load_spec
    from gemkd.transfer.errors import ConfigError

    template = ROOT / "docs" / "examples" / "my_logs" / "spec.yaml"
    assert smaller_config("small") == "tiny"

    def check(sets: list[str]) -> None:
        spec = load_spec(template, sets)
        plan = plan_run(spec)
        check_warm_start(spec, plan.domain_fms[0], plan.teachers[0])

    with pytest.raises(ConfigError, match="set hierarchical.config"):
        check(["teacher.config=tiny"])
    check(["teacher.config=tiny", "hierarchical.config=tiny"])


def test_an_unvalidated_two_epoch_fit_gets_every_suggestion(tmp_path):
    run = _bad_run(tmp_path / "r", {"teacher": {"config": "small"}},
                   {"val_days": None, "select": "last", "max_epochs": 2, "epochs_trained": 2,
                    "chosen_epoch": 2})
    line = _try(run)
    assert line.startswith("What to try: a validation day with early stopping "
                           "(`teacher_val_days: 1`")
    assert ", one epoch (`teacher: {overrides: {max_epochs: 1}}`" in line
    assert ", or a smaller teacher config (`teacher: {config: tiny}`)" in line
    assert "Already in effect" not in line and "hierarchical" not in line  # no FM from GEM


def test_the_smallest_config_in_one_epoch_leaves_the_data(tmp_path):
    run = _bad_run(tmp_path / "r", {"teacher": {"config": "tiny"}},
                   {"val_days": None, "select": "last", "max_epochs": 1, "epochs_trained": 1,
                    "chosen_epoch": 1})
    line = _try(run)
    assert line == ("Already in effect: one epoch. What to try: no shipped teacher config is "
                    "smaller than 'tiny'; what is left is the teacher's data (a longer "
                    "`teacher_days` window) or a config of your own (a YAML path in "
                    "`teacher.config`).")
    assert smaller_config("tiny") is None and smaller_config("base") == "small"
