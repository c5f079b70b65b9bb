"""``release_process_group`` closes the default group a strategy left open, and is a no-op
without one (the CLI calls it after every command that imported the trainer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from gemkd.transfer.training import release_process_group


def test_destroys_an_open_group_and_is_a_no_op_after(tmp_path):
    if not dist.is_available():
        pytest.skip("torch.distributed is not built in this torch")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    assert dist.is_initialized()
    release_process_group()
    assert not dist.is_initialized()
    release_process_group()  # nothing open: nothing to do, no error
    assert not dist.is_initialized()


CHILD = """
import json, sys, time
from pathlib import Path
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from gemkd.transfer.training import release_process_group

def gloo_threads():
    names = []
    for p in Path("/proc/self/task").glob("*/comm"):
        try:
            names.append(p.read_text().strip())
        except OSError:  # a thread that ended between the listing and the read
            pass
    return sum(n in ("pt_gloo_runloop", "gloo_tcp_loop") for n in names)

def settle(want, deadline=10.0):
    # gloo starts and stops its threads asynchronously: wait (bounded) for the count wanted
    end = time.monotonic() + deadline
    while not want(gloo_threads()) and time.monotonic() < end:
        time.sleep(0.05)
    return gloo_threads()

before = gloo_threads()
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("replicate", "shard"))
assert mesh["shard"].get_group() is not None
during = settle(lambda n: n > before)
release_process_group()
initialized = dist.is_initialized()
after = settle(lambda n: n == before)
print(json.dumps({"before": before, "during": during, "after": after,
                  "initialized": initialized}))
"""


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_a_device_mesh_keeps_no_gloo_threads_alive(tmp_path):
    """FSDP under ``ModelParallelStrategy`` builds a DeviceMesh whose process groups outlived
    ``destroy_process_group`` with their gloo threads, until the interpreter's exit, where a
    rank could abort ("terminate called without an active exception"). In a process of its
    own: the count is the process's, and another test's threads would move it."""
    if not dist.is_available() or not Path("/proc/self/task").is_dir():
        pytest.skip("needs torch.distributed and /proc")
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "store")], check=True,
                         capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["during"] > got["before"]
    assert not got["initialized"]
    assert got["after"] == got["before"]  # the mesh (still referenced) holds no group
