"""Test helpers for the teacher tests: the tiny schema and random batches are the public
:mod:`gemkd.transfer.testing` (re-exported here, so the tests keep importing them from one place);
``TINY`` is GEM's test-sized configuration."""

from __future__ import annotations

from gemkd.transfer.testing import (
    CATEGORICAL,
    DENSE,
    DOMAINS,
    SEQUENCE,
    TASKS,
    batch_from_lengths,
    heavy_tailed_lengths,
    random_batch,
    select,
    tiny_schema,
)

__all__ = ["CATEGORICAL", "DENSE", "DOMAINS", "SEQUENCE", "TASKS", "TINY", "batch_from_lengths",
           "heavy_tailed_lengths", "random_batch", "select", "tiny_schema"]

TINY = {  # hyper-parameters for fast unit tests
    "d": 8,
    "n_layers": 2,
    "n_F": 3,
    "n_L": 3,
    "k": 4,
    "mlp_width": 32,
    "n_heads": 2,
    "n_cls": 2,
    "n_xsum": 2,
    "n_pma": 2,
    "n_recent": 3,
    "pyramid_recent": 8,
    "pyramid_chunk": 4,
    "trunk_dim": 16,
    "head_hidden": 8,
}
