"""``release_process_group`` closes the default group a strategy left open, and is a no-op
without one (the CLI calls it after every command that imported the trainer)."""

from __future__ import annotations

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


def _gloo_threads() -> int:
    """Native threads of this process that gloo runs (named by torch and gloo)."""
    return sum(p.read_text().strip() in ("pt_gloo_runloop", "gloo_tcp_loop")
               for p in Path("/proc/self/task").glob("*/comm"))


def test_a_device_mesh_keeps_no_gloo_threads_alive(tmp_path):
    """FSDP under ``ModelParallelStrategy`` builds a DeviceMesh whose process groups outlived
    ``destroy_process_group`` with their gloo threads, until the interpreter's exit, where a
    rank could abort ("terminate called without an active exception")."""
    if not dist.is_available() or not Path("/proc/self/task").is_dir():
        pytest.skip("needs torch.distributed and /proc")
    from torch.distributed.device_mesh import init_device_mesh

    before = _gloo_threads()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("replicate", "shard"))
    assert mesh["shard"].get_group() is not None
    assert _gloo_threads() > before
    release_process_group()
    assert not dist.is_initialized()
    assert _gloo_threads() == before  # the mesh (still referenced here) holds no group
