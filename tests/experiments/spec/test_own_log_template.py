"""README's own-log spec template (docs/examples/my_logs/spec.yaml) loads, and the settings it
takes from the quickstart are the quickstart's: a new user's run is the quickstart's recipe on
their data (a key left out would take the spec's default, which is not always the
quickstart's)."""

from __future__ import annotations

from pathlib import Path

import yaml

from gemkd.experiments.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "docs" / "examples" / "my_logs" / "spec.yaml"
QUICKSTART = ROOT / "experiments" / "quickstart.yaml"
FROM_QUICKSTART = ("seeds", "student", "ema_decay", "tuning", "hierarchical", "variants",
                   "batch_size", "lr", "kd_loss")


def test_the_template_loads_with_the_quickstarts_settings():
    template, quick = load_spec(TEMPLATE), load_spec(QUICKSTART)
    for key in FROM_QUICKSTART:
        assert getattr(template, key) == getattr(quick, key), key
    assert template.teacher.config == "small" and template.data.source == "dataset"


def test_the_template_differs_from_the_defaults_where_the_quickstart_does(tmp_path):
    """What the template spells out matters: without it those keys take other values."""
    raw = yaml.safe_load(TEMPLATE.read_text())
    bare = {k: raw[k] for k in ("name", "data", "teacher", "teacher_days", "student_days",
                                "eval_days", "student_tasks", "student_domain")}
    path = tmp_path / "bare.yaml"
    path.write_text(yaml.safe_dump(bare))
    defaults = load_spec(path)
    template = load_spec(TEMPLATE)
    for key in ("seeds", "ema_decay", "tuning", "hierarchical"):
        assert getattr(defaults, key) != getattr(template, key), key


def test_the_large_log_recipe_spec_and_its_teacher_load():
    """docs/examples/large_log (guides/scale.md's 16M-row recipe): the spec loads, its teacher
    config is found beside it and learns from the window's 2 days, its store starts there."""
    from gemkd.experiments.run.inputs import store_days
    from gemkd.experiments.run.preflight import plan_run

    spec = load_spec(ROOT / "docs" / "examples" / "large_log" / "spec.yaml")
    cfg = plan_run(spec).teachers[0]
    assert cfg.name == "gem-large-log" and cfg.model["max_rows"] == 262_144
    assert cfg.train_days == [10, 12] and cfg.max_epochs == 1 and cfg.val_days is None
    assert store_days(spec, 0) == (10, 16)
