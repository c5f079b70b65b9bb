"""Dedupe swept over the id axis in windows keeps exactly what a whole-store pass kept."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gemkd.transfer.store import StoreWriter, TeacherStore
from gemkd.transfer.store.dedupe import dedupe_shards
from tests.transfer.store.helpers import feed, make_rows, writer_args


def _staged(tmp_path, rows):
    """Two ranks' closed writers: rank 1 repeats rank 0's first rows and some of its own."""
    w0 = StoreWriter(tmp_path / "s", rank=0, world_size=2, **writer_args())
    w1 = StoreWriter(tmp_path / "s", rank=1, world_size=2, staging_dir=w0.staging_dir,
                     **writer_args())
    r0 = {k: v[:200] for k, v in rows.items()}
    r1 = {k: np.concatenate([v[200:], v[:7], v[250:255]]) for k, v in rows.items()}
    r1["logits"][-12:] += 1.0  # a kept row is the first copy's
    feed(w0, r0)
    feed(w1, r1, batch=9)
    w0.close()
    w1.close()
    return w0


@pytest.mark.parametrize("window", [1, 20, 1 << 22])
def test_windows_keep_the_first_copy(tmp_path, window):
    rows = make_rows(300)
    w0 = _staged(tmp_path, rows)
    shards = w0._collect()
    ids = np.concatenate([pq.read_table(w0.staging_dir / s.file, columns=["example_id"])[0]
                          .to_numpy() for s in shards])
    want = int(pd.Index(ids).duplicated(keep="first").sum())
    out, removed = dedupe_shards(w0.staging_dir, shards, w0.parquet_options, window_rows=window)
    assert removed == want == 12
    assert sum(s.rows for s in out) == 300
    for s in out:
        assert pq.read_metadata(w0.staging_dir / s.file).num_rows == s.rows
        days = pq.read_table(w0.staging_dir / s.file, columns=["day"])[0].to_numpy()
        assert s.days == sorted(set(days.tolist()))
    table = pa.concat_tables([pq.read_table(w0.staging_dir / s.file) for s in out])
    table = table.sort_by("example_id")
    o = np.argsort(rows["example_id"])
    np.testing.assert_array_equal(table["example_id"].to_numpy(), rows["example_id"][o])
    np.testing.assert_array_equal(table["logit_click"].to_numpy(), rows["logits"][o, 0])
    w0.abort()


def test_export_drops_duplicates_through_finalize(tmp_path):
    rows = make_rows(300)
    m = _staged(tmp_path, rows).finalize()
    assert m.extra["duplicates_removed"] == 12 and m.total_rows == 300
    store = TeacherStore(tmp_path / "s")
    table = store.read().sort_by("example_id")
    o = np.argsort(rows["example_id"])
    np.testing.assert_array_equal(store.logits(table), rows["logits"][o])


def test_row_count_differs_from_marker(tmp_path):
    from gemkd.transfer.errors import StoreError

    w0 = _staged(tmp_path, make_rows(300))
    shards = w0._collect()
    shards[0] = type(shards[0])(**{**shards[0].__dict__, "rows": shards[0].rows + 1})
    with pytest.raises(StoreError, match=r"part-r000-00000\.parquet: has 40 rows, its rank's "
                                         r"marker says 41"):
        dedupe_shards(w0.staging_dir, shards, w0.parquet_options)
    w0.abort()
