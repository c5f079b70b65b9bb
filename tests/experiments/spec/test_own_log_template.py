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
