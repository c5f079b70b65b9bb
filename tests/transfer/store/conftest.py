"""Fixtures of the store tests: random rows and a store written from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.transfer.store.helpers import make_rows, write_store


@pytest.fixture
def rows():
    return make_rows(150)


@pytest.fixture
def store_dir(tmp_path, rows) -> Path:
    write_store(tmp_path / "store", rows)
    return tmp_path / "store"
