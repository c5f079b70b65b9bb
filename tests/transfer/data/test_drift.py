"""Day-to-day movement of base rates, per domain and task (``gemkd data summary --drift``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.data.drift import base_rate_drift


@pytest.fixture
def data(tmp_path):
    # domain a: 4 rows a day with 2, 1, 3 clicks; domain b: 2 rows a day, always 1 click
    clicks = {"a": [1, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0], "b": [1, 0] * 3}
    t0 = 1_704_067_200  # 2024-01-01 00:00 UTC: import refuses times before 1990
    rows = [(s, t0 + d * 86_400 + i, c) for s, cs in clicks.items()
            for d in range(3) for i, c in enumerate(cs[d * len(cs) // 3:(d + 1) * len(cs) // 3])]
    pd.DataFrame(rows, columns=["surface", "t", "click"]).to_csv(tmp_path / "log.csv",
                                                                 index=False)
    (tmp_path / "map.yaml").write_text(yaml.safe_dump({
        "time": "t", "domain": "surface", "labels": {"click": "click"}}))
    out = tmp_path / "out"
    assert main(["data", "import", "--src", str(tmp_path / "log.csv"), "--mapping",
                 str(tmp_path / "map.yaml"), "--out", str(out)]) == 0
    return out


def test_drift_figures(data):
    d = base_rate_drift(data).set_index("domain")
    a = d.loc["a"]
    logit = np.log(np.array([2.5, 1.5, 3.5]) / np.array([2.5, 3.5, 1.5]))  # (pos+.5)/(n+1)
    assert a["days"] == 3 and a["rows"] == 12 and a["mean_rate"] == 0.5
    assert a["std_rate"] == pytest.approx(0.25)
    assert a["std_logit"] == pytest.approx(np.std(logit, ddof=1))
    assert a["mean_abs_dlogit"] == pytest.approx(np.abs(np.diff(logit)).mean())
    assert a["noise_logit"] == pytest.approx(1.0)  # sqrt(1 / (4 · 0.5 · 0.5))
    assert a["excess_std_logit"] == 0.0  # all of a's movement is what 4 rows a day give
    b = d.loc["b"]
    assert b["std_rate"] == 0 and b["std_logit"] == 0 and b["mean_abs_dlogit"] == 0
    assert list(d.index) == ["a", "b", "all"] and d.loc["all", "rows"] == 18


def test_summary_prints_drift(data, capsys):
    assert main(["data", "summary", str(data), "--drift"]) == 0
    out = capsys.readouterr().out
    assert "share_a" in out and "excess_std_logit" in out and "mean_abs_dlogit" in out
