"""``studies/teacher_days_grid.py``: one point per run, ΔNE and its interval from the run's
files, the teacher's shares from its results, a multi-world run read at one world."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from studies.teacher_days_grid import main


def _run(path, days, worlds, ne_teacher, kd_ne, full_ne):
    path.mkdir()
    (path / "spec.yaml").write_text(yaml.safe_dump({"student_domain": "stories"}))
    table = {str(w): {"0": {"teacher_days": [30 - days, 30], "teacher_rows": days * 75000,
                            "ratio": days * 75000 / 48000, "protocol": "streaming"}}
             for w in worlds}
    (path / "teacher_data.json").write_text(json.dumps(table))
    rows = []
    for w in worlds:
        for seed, noise in ((0, 0.001), (1, -0.001)):
            for v, ne in (("baseline", 0.90), ("kd", kd_ne + noise), ("full", full_ne - noise)):
                rows.append({"variant": v, "seed": seed, "world": w, "domain": "stories",
                             "task": "click", "teacher_lag_days": 0, "ne": ne, "auc": 0.7,
                             "calibration": 1.0, "ne_baseline": 0.90,
                             "ne_teacher": ne_teacher, "ne_oracle": 0.70,
                             "ne_feature_oracle": 0.80, "delta_ne": 0.90 - ne,
                             "transfer_ratio": None, "efficiency_vs_kd": None})
    pd.DataFrame(rows).to_csv(path / "results.csv", index=False)
    iv = [{"teacher_lag_days": 0, "domain": "stories", "task": "click", "variant": v,
           "delta_ne_lo": lo, "delta_ne_hi": hi} for v, lo, hi in (("kd", 0.01, 0.02),
                                                                    ("full", 0.02, 0.05))]
    pd.DataFrame(iv).to_csv(path / "intervals.csv", index=False)
    return path


def test_grid_points_and_outputs(tmp_path):
    a = _run(tmp_path / "d5", 5, [0], 0.86, 0.885, 0.87)
    b = _run(tmp_path / "bench", 30, [0, 1, 2], 0.80, 0.87, 0.84)
    pts = main(["--runs", str(a), str(b), "--world", "0", "--markdown", str(tmp_path / "g.md"),
                "--plot", str(tmp_path / "g.png"), "--json", str(tmp_path / "g.json")])
    five, thirty = pts.set_index("days").loc[5], pts.set_index("days").loc[30]
    assert five["kd_delta_ne"] == pytest.approx(0.015)
    assert (five["kd_lo"], five["kd_hi"]) == (0.01, 0.02)  # the one-world run's own interval
    assert five["share_oracle"] == pytest.approx(0.04 / 0.20)
    assert five["share_feature_oracle"] == pytest.approx(0.04 / 0.10)
    # a three-world run: world 0's seeds, mean ± 2 std (its pooled interval is not world 0's)
    assert thirty["full_delta_ne"] == pytest.approx(0.06)
    assert thirty["full_lo"] == pytest.approx(0.06 - 2 * 0.001414213, abs=1e-6)
    assert thirty["ratio"] == pytest.approx(30 * 75000 / 48000)
    text = (tmp_path / "g.md").read_text()
    assert "| 5 | 375,000 (7.8×) | 0.8600 | 20.0 % | 40.0 % |" in text
    assert (tmp_path / "g.png").stat().st_size > 1000
    assert len(json.loads((tmp_path / "g.json").read_text())) == 2
