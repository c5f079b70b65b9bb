"""Every world's cached steps side by side on the run's workers (experiments/run/prepare.py):
the same steps, keys and numbers as a run that prepares one world after another, each world's
lines in its own log, and the run's wall time per phase in log.txt and phases.json."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from tests.experiments.spec.test_worlds import WORLDS

NUMBERS = ["ne", "auc"]


def run(spec, out, workers: int) -> int:
    return main(["run", str(spec), "--out", str(out), "--threads", "1", "--workers",
                 str(workers)])


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_worlds_prepared_side_by_side_equal_one_after_another(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(WORLDS))
    serial, side = tmp_path / "serial", tmp_path / "side"
    assert run(spec, serial, 1) == 0
    assert run(spec, side, 2) == 0
    steps = sorted(p.parent.name for p in serial.glob("cache/*/DONE"))
    assert steps == sorted(p.parent.name for p in side.glob("cache/*/DONE"))  # same keys
    a, b = (pd.read_csv(d / "results.csv").sort_values(["world", "variant", "domain", "seed"])
            .reset_index(drop=True) for d in (serial, side))
    pd.testing.assert_frame_equal(a[NUMBERS], b[NUMBERS])
    log = (side / "log.txt").read_text()
    assert "side by side on 2 workers" in log
    assert "world 11: steps done in" in log and "world 12: steps done in" in log
    assert "[run] teacher" not in log  # the world loop found every step done
    assert log.count("[cached] teacher") == 2
    for world in (11, 12):
        own = (side / "logs" / f"prepare_world{world}.txt").read_text()
        assert "[run] teacher" in own and f"world {world}: every step done" in own
    assert "one world after another: no local worker processes" in \
        (serial / "log.txt").read_text()
    phases = json.loads((side / "phases.json").read_text())
    assert set(phases) == {"steps", "tuning", "final runs"}
    assert all(v >= 0 for v in phases.values())
    assert "wall time per phase: steps" in log

    # a rerun that trains nothing keeps the phases of the run that did the work
    before = (side / "phases.json").read_text()
    assert run(spec, side, 1) == 0
    assert (side / "phases.json").read_text() == before
    assert "every step and student run was reused, so phases.json keeps" in \
        (side / "log.txt").read_text()
