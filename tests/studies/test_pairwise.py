"""studies.pairwise: any two variants compared at every lag with the report's own intervals —
the same numbers as the report's comparison against plain KD when B is kd, and B − A the
mirror of A − B."""

from __future__ import annotations

import pytest

from gemkd.experiments.report.cluster_files import load_eval_sets
from gemkd.experiments.report.intervals import lag_intervals
from studies.pairwise import compare, main
from tests.experiments.report.cluster_run import make_cluster_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_cluster_run(tmp_path_factory.mktemp("pairwise"), worlds=(0, 1, 2), lags=(0, 3))


def test_against_kd_it_is_the_reports_comparison(run):
    df = compare(run, ["kd_aux vs kd"], task="click", domain="all")
    assert list(df["teacher_lag_days"]) == [0, 3]
    sets = [s for s in load_eval_sets(run) if s.lag == 3]
    table, _ = lag_intervals(sets, 200, 0)
    want = table[(table.variant == "kd_aux") & (table.task == "click") & (table.domain == "all")]
    got = df[df.teacher_lag_days == 3].iloc[0]
    assert got["diff"] == pytest.approx(float(want["vs_kd"].iloc[0]), abs=1e-12)
    assert (got["lo"], got["hi"]) == pytest.approx((float(want["vs_kd_lo"].iloc[0]),
                                                    float(want["vs_kd_hi"].iloc[0])), abs=1e-12)
    assert got["verdict"] == ("A above B" if got["lo"] > 0 else
                              "A below B" if got["hi"] < 0 else "not resolved")


def test_swapped_pair_is_the_mirror(run):
    ab = compare(run, ["kd_aux vs kd_repr"], task="click", domain="all")
    ba = compare(run, ["kd_repr vs kd_aux"], task="click", domain="all")
    assert list(ab["diff"]) == pytest.approx(list(-ba["diff"]), abs=1e-12)
    assert list(ab["lo"]) == pytest.approx(list(-ba["hi"]), abs=1e-9)


def test_markdown_and_unknown_variant(run, tmp_path, capsys):
    out = tmp_path / "pairs.md"
    main(["--run", str(run), "--pair", "kd_aux vs kd", "--task", "click", "--domain", "all",
          "--markdown", str(out)])
    text = out.read_text()
    assert text.startswith("| pair | lag |") and text.count("| kd_aux vs kd |") == 2
    with pytest.raises(SystemExit, match="no 'nope' rows at lag 0"):
        compare(run, ["nope vs kd"])
