"""bench_scale's arithmetic (growth per row, the size that reaches 24 GB) and its section of the
rendered performance page."""

from __future__ import annotations

import pytest

from benchmarks.bench_scale import LIMIT, figures_of, fit
from benchmarks.render_performance import render


def _table() -> dict:
    sizes = [100_000, 200_000, 400_000]
    grows = {str(n): {"seconds": n / 1e5, "peak_mb": 400 + n * 1000 / 2**20} for n in sizes}
    flat = {str(n): {"seconds": 2.0, "peak_mb": 500.0} for n in sizes}
    return {"this tree": {"join": flat}, "before": {"join": grows}}


def test_fit_and_figures():
    a, b = fit([1, 2, 4], [1.0, 2.0, 4.0])
    assert a == pytest.approx(0, abs=1e-3) and b == pytest.approx(2**20)
    figs = {f["name"]: f for f in figures_of(_table(), [100_000, 200_000, 400_000])}
    assert figs["join (this tree): peak RSS growth"]["value"] == pytest.approx(0, abs=1e-6)
    assert figs["join (this tree): peak RSS growth"]["met"] is True
    assert figs["join (this tree): rows at 24 GB"]["value"] is None
    assert figs["join (before): peak RSS growth"]["value"] == pytest.approx(1000, rel=1e-9)
    assert figs["join (before): rows at 24 GB"]["value"] == pytest.approx(
        (LIMIT - 400 * 2**20) / 1000, rel=1e-6)
    assert figs["join (before): peak RSS growth"]["target"] is None


def test_rendered_section():
    run = {"bench": "scale", "rows": [100_000, 200_000, 400_000], "table": _table(),
           "figures": [], "_file": "scale.json", "command": "python -m benchmarks.bench_scale"}
    page = render([run], "make bench")
    assert "## Data path at scale" in page
    assert ("| join | this tree | 2.0 s / 500 MB | 2.0 s / 500 MB | 2.0 s / 500 MB | 0 B/row | "
            "never |") in page
    oom = (LIMIT - 400 * 2**20) / 1000
    assert ("| join | before | 1.0 s / 495 MB | 2.0 s / 591 MB | 4.0 s / 781 MB | 1,000 B/row | "
            f"{oom:,.0f} rows |") in page


def test_a_step_measured_at_some_sizes_only():
    """A step missing at a size (measured in another run) shows a dash; its growth comes from
    the sizes it has."""
    table = {"this tree": {"import": {"100000": {"seconds": 1.0, "peak_mb": 400.0},
                                      "400000": {"seconds": 4.0, "peak_mb": 400.0}}}}
    run = {"bench": "scale", "rows": [100_000, 200_000, 400_000], "table": table,
           "figures": [], "_file": "scale.json", "command": "python -m benchmarks.bench_scale"}
    page = render([run], "make bench")
    assert "| import | this tree | 1.0 s / 400 MB | — | 4.0 s / 400 MB | 0 B/row | never |" in page
