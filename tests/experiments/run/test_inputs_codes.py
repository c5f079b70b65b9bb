"""A student's LoopFM codes are its scope's as-of index (its days), shared by the students of
that scope, one scope held at a time; an index given whole is used as it is."""

from __future__ import annotations

import numpy as np

from gemkd.experiments.run.student import Inputs
from gemkd.transfer.repr_features import AsOfCodes, CodeStore, write_code_store


def _store(tmp_path) -> CodeStore:
    rng = np.random.default_rng(0)
    m = 600
    ts = np.sort(rng.integers(0, 6000, m))
    write_code_store(tmp_path / "codes", np.arange(m), rng.integers(0, 20, m), ts,
                     (ts // 1000).astype(np.int32), rng.integers(-127, 128, (m, 4)).astype(np.int8),
                     8, 4, {"teacher_version": "v"})
    return CodeStore(tmp_path / "codes")


def test_codes_for_opens_one_scope_at_a_time(tmp_path):
    inputs = Inputs({}, _store(tmp_path), max_events=7)
    a = inputs.codes_for((3, 5))
    assert isinstance(a, AsOfCodes) and a.days == (3, 5) and a.max_events == 7
    assert inputs.codes_for((3, 5)) is a
    b = inputs.codes_for((4, 6))
    assert b is not a and b.days == (4, 6) and list(inputs._asof) == [(4, 6)]


def test_a_whole_index_and_no_codes_pass_through(tmp_path):
    whole = AsOfCodes(_store(tmp_path), 5)
    assert Inputs({}, whole).codes_for((3, 5)) is whole
    assert Inputs({}).codes_for((3, 5)) is None
