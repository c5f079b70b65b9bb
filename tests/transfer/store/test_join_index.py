"""The join's two indexes (direct-address for dense ids, binary search for sparse) agree."""

from __future__ import annotations

import numpy as np
import pytest

from gemkd.transfer.store import TeacherJoin, TeacherStore
from tests.transfer.store.helpers import make_rows, write_store


@pytest.mark.parametrize("stride, dense", [(1, True), (3, True), (10**9, False)])
def test_dense_and_sparse_index_same_answers(tmp_path, stride, dense):
    rows = make_rows(300)
    rows["example_id"] = rows["example_id"] // 7 * stride + 5  # 5, 5+s, 5+2s, ... shuffled
    write_store(tmp_path / "s", rows)
    join = TeacherJoin(TeacherStore(tmp_path / "s"), policy="mask", with_emb=True)
    assert (join._dense is not None) == dense
    ids = rows["example_id"]
    rng = np.random.default_rng(0)
    absent = np.array([-(2**62), 4, ids.max() + 1, ids.max() + 2, 2**62])
    query = rng.permutation(np.concatenate([ids[:150], absent]))
    res = join(query)
    where = {int(i): k for k, i in enumerate(ids)}
    assert res.found.tolist() == [int(q) in where for q in query]
    for j, q in enumerate(query.tolist()):
        if q in where:
            np.testing.assert_array_equal(res.logits[j], rows["logits"][where[q]])
            np.testing.assert_allclose(res.emb[j], rows["emb"][where[q]], rtol=1e-3, atol=1e-3)
        else:
            assert not res.logits[j].any() and not res.emb[j].any()
    assert res.found.sum() == 150 and join.coverage == pytest.approx(150 / len(query))
