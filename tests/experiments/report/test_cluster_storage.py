"""The per-user files as runs now store them (compressed, float32 loss sums, whole counts as
integers) give the intervals and verdicts of the float64 files runs wrote before, within
1e-6 (the bound: 2^-24 of the NEs compared, ~1e-7 here); a run directory with the older files,
or with both kinds in one folder (a run resumed by a newer gemkd), reads as before: the paths,
array names and ``np.load`` are the same, so the layout version is unchanged."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gemkd.experiments.report.intervals import COLUMNS, run_intervals
from gemkd.transfer.metrics.clusters import compact, load_clusters
from tests.experiments.report.cluster_run import make_cluster_run

#: The largest change the float32 loss sums may make to an interval's number here.
TOLERANCE = 1e-6


def _restore(run: Path, every: int = 1) -> int:
    """Rewrite every ``every``-th clusters file as ClusterLoss.save writes it now; how many."""
    files = sorted(run.glob("clusters/world=*/lag=*/*.npz"))[::every]
    for path in files:
        buf = io.BytesIO()
        np.savez_compressed(buf, **compact(load_clusters(path)))
        path.write_bytes(buf.getvalue())
    return len(files)


def _numbers(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    keys = ["world", "teacher_lag_days", "variant", "domain", "task"]
    table = table.sort_values([k for k in keys if k in table.columns]).reset_index(drop=True)
    numeric = table.select_dtypes("number")
    return numeric, table.drop(columns=numeric.columns)


@pytest.fixture(scope="module")
def old_run(tmp_path_factory) -> Path:
    """A run directory of two worlds whose files are float64 ``np.savez`` (as runs wrote)."""
    return make_cluster_run(tmp_path_factory.mktemp("old"), worlds=(0, 1), users=200)


@pytest.mark.parametrize("every", [1, 2], ids=["all-new", "mixed"])
def test_compact_files_give_the_same_intervals_and_verdicts(old_run, tmp_path, every):
    before = run_intervals(old_run)
    new = tmp_path / "new"
    shutil.copytree(old_run, new)
    assert _restore(new, every) > 0
    old_bytes = sum(p.stat().st_size for p in old_run.glob("clusters/**/*.npz"))
    new_bytes = sum(p.stat().st_size for p in new.glob("clusters/**/*.npz"))
    assert new_bytes < old_bytes
    after = run_intervals(new)
    assert before.resolved and after.resolved
    nb, tb = _numbers(before.table[COLUMNS])
    na, ta = _numbers(after.table[COLUMNS])
    pd.testing.assert_frame_equal(tb, ta)  # verdicts, names: identical
    diff = (nb - na).abs().to_numpy()
    finite = np.isfinite(nb.to_numpy())
    assert np.array_equal(finite, np.isfinite(na.to_numpy()))
    assert np.nanmax(np.where(finite, diff, 0.0)) <= TOLERANCE
    assert np.nanmax(np.where(finite, diff, 0.0)) > 0  # the float32 rounding is there
    wb, wa = _numbers(before.by_world), _numbers(after.by_world)
    pd.testing.assert_frame_equal(wb[1], wa[1])
    assert np.nanmax((wb[0] - wa[0]).abs().to_numpy()) <= TOLERANCE

