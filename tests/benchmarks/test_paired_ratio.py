"""bench_transfer's ratios: the median of the rounds' own ratios, not a ratio of medians."""

from __future__ import annotations

import pytest

from benchmarks.transfer_figures import paired, ratio_figure


def test_median_of_round_ratios_resists_machine_speed_drift():
    # the machine runs 1x, 2x, 1x, 2x, 2x slower by round; the variant costs 1.2x the baseline
    speed = [1.0, 2.0, 1.0, 2.0, 2.0]
    base = [0.20 * s for s in speed]
    variant = [0.24 * s for s in speed]
    variant[1] = 0.24  # one round where the variant ran in a fast moment: ratio 0.6
    value, note = paired(variant, base)
    assert value == pytest.approx(1.2)
    assert note.startswith("rounds' ratios: IQR ")
    # a ratio of the medians mixes rounds: 0.24 / 0.40 here, below 1 for a variant that adds work
    assert sorted(variant)[2] / sorted(base)[2] == pytest.approx(0.6)


def test_ratio_figure_target_and_errors():
    ok = ratio_figure("x", [1.1] * 5, [1.0] * 5, "<= 1.15")
    assert ok["value"] == pytest.approx(1.1) and ok["met"] is True
    missed = ratio_figure("x", [1.3] * 5, [1.0] * 5, "<= 1.25")
    assert missed["met"] is False
    failed = ratio_figure("x", [1.0] * 5, [1.0] * 5, "<= 1.25", error="RuntimeError: boom")
    assert failed["value"] is None and failed["met"] is None and failed["note"].startswith("Run")
    assert paired([1.0, 2.0], [1.0]) == (None, "")  # rounds that do not pair: no figure
