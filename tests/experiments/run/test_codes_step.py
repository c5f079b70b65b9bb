"""The codes step, streamed row group by row group and written by an external sort, writes the
code store the whole-store path wrote, byte for byte."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from gemkd.adapters.compressor import fit_compressor
from gemkd.experiments.run.codes_step import build_codes
from gemkd.transfer.repr_features import (
    CODES_FILE,
    CODES_JSON,
    CodeStore,
    quantize_codes,
    write_code_store,
)
from gemkd.transfer.store import TeacherStore
from tests.transfer.store.helpers import make_rows, write_store


def test_streamed_codes_equal_whole_store_codes(tmp_path):
    write_store(tmp_path / "export" / "store", make_rows(1500, days=(2, 3, 4, 5)),
                rows_per_shard=512, row_group_rows=100)
    store = tmp_path / "export" / "store"
    cfg = SimpleNamespace(code_dim=4, bits=8, epochs=2)
    out = build_codes(store, (2, 4), cfg, seed=3, cache=tmp_path / "cache", log=lambda _: None)
    # the former path: the window and then the whole store read at once
    ts = TeacherStore(store)
    model, _ = fit_compressor(ts.embeddings(ts.read(days=(2, 4))), code_dim=4, epochs=2,
                              seed=3)
    table = ts.read()
    with torch.no_grad():
        want = quantize_codes(model.encode(torch.from_numpy(ts.embeddings(table))).numpy(), 8)
    got = CodeStore(out)
    t = got.read()
    order = np.argsort(table["example_id"].to_numpy())
    by_id = np.argsort(t["example_id"].to_numpy())
    np.testing.assert_array_equal(t["example_id"].to_numpy()[by_id],
                                  table["example_id"].to_numpy()[order])
    np.testing.assert_array_equal(got.codes_q(t)[by_id].view(np.int8), want[order])
    for k in ("user_id", "ts", "day"):
        np.testing.assert_array_equal(t[k].to_numpy()[by_id], table[k].to_numpy()[order])
    # the former write: every row's keys and code held, sorted and written at once
    whole = write_code_store(tmp_path / "whole", *(table[k].to_numpy() for k in
                                                   ("example_id", "user_id", "ts", "day")),
                             want, 8, 4, got.meta)
    for name in (CODES_FILE, CODES_JSON):
        assert (out / name).read_bytes() == (whole / name).read_bytes()
