"""``validate``'s full pass holds one row group at a time: when the reader starts on a row
group, nothing of the previous one is still allocated (DESIGN §2.2; the figures in
docs/notes/2026-12-04-store-scale-2.md)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from gemkd.transfer.data.dataset_reader import DatasetReader

ROOT = Path(__file__).resolve().parents[3]


CHILD = """
import gc, json, sys, time
import pyarrow as pa
from gemkd.transfer.data.audit import validate_dataset
from gemkd.transfer.data.dataset_reader import DatasetReader

at_load = []
load = DatasetReader._load

def spy(self, unit, pf):
    # Arrow's reader threads return a dropped row group's buffers to the pool a moment after
    # the last reference goes (seen with pyarrow 26): wait up to 2 s for the count to settle.
    # A row group still referenced never settles, which is what this test catches.
    for _ in range(200):
        if pa.total_allocated_bytes() <= base:
            break
        time.sleep(0.01)
    at_load.append(pa.total_allocated_bytes())
    return load(self, unit, pf)

DatasetReader._load = spy
gc.collect()
base = pa.total_allocated_bytes()
reader = validate_dataset(sys.argv[1])
print(json.dumps({"base": base, "at_load": at_load, "units": len(reader.units)}))
"""


def test_validate_pass_keeps_no_earlier_row_group(tiny_data):
    """In a process of its own: Arrow's allocation counter is the process's, and a thread an
    earlier test left (a loader's prefetch finishing) would count in it."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(tiny_data)], capture_output=True,
                         text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(got["at_load"]) == got["units"] > 2
    # a loop variable holding the last batch (views of its row group's Arrow buffers) would
    # leave the previous row group allocated here
    assert max(got["at_load"]) <= got["base"]


def test_a_held_batch_keeps_its_row_group(tiny_data, monkeypatch):
    """The spy above can see what it guards against: a consumer that keeps the last batch."""
    at_load: list[int] = []
    load = DatasetReader._load

    def spy(self, unit, pf):
        at_load.append(pa.total_allocated_bytes())
        return load(self, unit, pf)

    monkeypatch.setattr(DatasetReader, "_load", spy)
    gc.collect()
    base = pa.total_allocated_bytes()
    for _batch in DatasetReader(tiny_data, batch_size=65536):
        pass
    assert at_load[0] <= base < min(at_load[1:])
