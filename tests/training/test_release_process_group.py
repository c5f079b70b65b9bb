"""``release_process_group`` closes the default group a strategy left open, and is a no-op
without one (the CLI calls it after every command that imported the trainer)."""

from __future__ import annotations

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
