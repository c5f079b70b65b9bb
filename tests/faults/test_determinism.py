"""Same spec and seeds, fresh run directory: the same teacher, the same results.csv (timing
columns aside), the same training curves."""

from __future__ import annotations

import pandas as pd

from tests.faults.conftest import gemkd_run, manifest, results


def test_two_runs_give_the_same_results(tiny_run, tmp_path, capsys):
    out = tmp_path / "again"
    capsys.readouterr()
    assert gemkd_run(tiny_run.spec, out) == 0
    log = capsys.readouterr().out
    assert "[cached]" not in log  # nothing shared with the first run: all recomputed
    for step in ("data", "teacher", "store"):
        assert f"[run] {step} (" in log

    first, again = results(tiny_run.out), results(out)
    assert len(again) == 2 * 4  # baseline, kd x (3 domains + all) x click
    assert again["ne"].notna().all() and (again["ne"] > 0).all()
    pd.testing.assert_frame_equal(again, first, check_exact=True)
    # the teacher's weights hash and every stored logit are bit-identical
    again_store = next(out.glob("cache/store-*")) / "store"
    assert manifest(again_store) == {**manifest(tiny_run.store),
                                     "extra": manifest(again_store)["extra"]}
    curves = sorted((tiny_run.out / "curves").glob("*.csv"))
    assert [c.name for c in curves] == ["baseline_seed0_lag0.csv", "kd_seed0_lag0.csv"]
    for curve in curves:
        pd.testing.assert_frame_equal(pd.read_csv(out / "curves" / curve.name),
                                      pd.read_csv(curve), check_exact=True)
