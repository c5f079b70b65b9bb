"""Wording the report owes its reader: a variant whose own teacher has a higher NE than GEM's
is flagged with the gap (a point estimate, no verdict), and an interval's end near zero keeps
the sign that decides its verdict (both found by new users on their own log)."""

from __future__ import annotations

import pytest

from gemkd.experiments.report import render_report
from tests.experiments.report.test_report import make_results, make_run


@pytest.mark.parametrize("offset, flagged", [(0.01, True), (-0.01, False)])
def test_a_domain_fm_worse_than_gem_is_flagged(tmp_path, offset, flagged):
    """hierarchical's own teacher (ne_source) worse than GEM on the evaluation days: the report
    says so and what to try (a new user's KuaiRand trial: 0.9388 against GEM's 0.9138, silent)."""
    results = make_results()
    results["ne_source"] = results["ne_teacher"]
    hier = results["variant"] == "hierarchical"
    results.loc[hier, "ne_source"] = results.loc[hier, "ne_teacher"] + offset
    text = render_report(make_run(tmp_path / "r", results))
    assert "Teachers on the same data: GEM " in text
    assert "hierarchical learned from a teacher of NE " in text
    assert ("**The teacher of hierarchical (+0.0100) scores a higher NE than GEM's** on these "
            "evaluation days (a point estimate on the same users, without an interval)"
            in text) is flagged


def test_an_interval_end_near_zero_keeps_its_sign():
    """A resolved verdict's lower end of 2e-05 and an unresolved one's of -2e-05 both read
    0.0000 at 4 decimals (a new user's trial asked which was which)."""
    from gemkd.experiments.report.summary import ci

    assert ci(0.0019, 2.36e-5, 0.0037) == "0.0019 [0.00002, 0.0037]"
    assert ci(0.0033, -1.8e-5, 0.0066) == "0.0033 [-0.00002, 0.0066]"
    assert ci(0.0, 0.0, 0.0) == "0.0000 [0.0000, 0.0000]"
    assert ci(0.01, 0.005, 0.02) == "0.0100 [0.0050, 0.0200]"
