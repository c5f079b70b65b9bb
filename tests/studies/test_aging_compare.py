"""``studies/aging_compare.py``: two aging results compared slope by slope, and the plot."""

from __future__ import annotations

import json

import pytest

from studies.aging_compare import main


def _result(path, slopes: dict[str, tuple[float, float, float]], base: float):
    curve, rows = [], []
    for model, (slope, lo, hi) in slopes.items():
        rows.append({"model": model, "group": "all", "task": "click", "metric": "ne_eval",
                     "slope": slope, "lo": lo, "hi": hi})
        for age in (0, 2, 4):
            v = base + slope * age
            curve.append({"model": model, "age": age, "group": "all", "task": "click",
                          "ne_eval": v, "ne_eval_lo": v - 0.01, "ne_eval_hi": v + 0.01})
    path.write_text(json.dumps({"curve": curve, "slopes": rows}))
    return path


def test_verdicts_and_plot(tmp_path):
    real = _result(tmp_path / "real.json", {"gem": (0.002, 0.001, 0.003),
                                            "mlp": (0.002, 0.001, 0.003),
                                            "tiny": (0.002, 0.0015, 0.0025)}, 0.87)
    syn = _result(tmp_path / "syn.json", {"gem": (0.0016, 0.0004, 0.0029),   # each inside
                                          "mlp": (0.0036, 0.0028, 0.0045),   # intervals touch
                                          "tiny": (0.01, 0.009, 0.011)}, 0.88)  # apart
    out = main(["--real", str(real), "--synthetic", str(syn), "--plot",
                str(tmp_path / "a.png"), "--markdown", str(tmp_path / "a.md")])
    verdict = out["table"].set_index("model")["verdict"]
    assert verdict.to_dict() == {"gem": "match", "mlp": "overlap", "tiny": "differ"}
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    assert "| gem | +0.00200 [+0.00100, +0.00300] | +0.00160" in (tmp_path / "a.md").read_text()
    with pytest.raises(SystemExit, match="no rows for group 'tab_0'"):
        main(["--real", str(real), "--real-group", "tab_0", "--synthetic", str(syn)])
