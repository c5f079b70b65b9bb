"""Fixtures of the metric tests."""

from __future__ import annotations

import warnings

import pytest


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield
