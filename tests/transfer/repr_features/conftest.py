"""Shared fixtures of the representation-feature tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny ops on a shared 2-core machine: one intra-op thread is ~15x faster than two."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
