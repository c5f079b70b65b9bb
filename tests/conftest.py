"""Shared fixtures: small generated datasets and the real MovieLens data from ../shared."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from transfer.config import load_dataclass
from transfer.data.synth import SynthConfig, generate

ROOT = Path(__file__).resolve().parents[1]
MOVIELENS = Path(os.environ.get(
    "GEMKD_MOVIELENS", ROOT.parent / "shared" / "data" / "movielens_latest_small"))


def tiny_config(**overrides) -> SynthConfig:
    return load_dataclass(SynthConfig, ROOT / "experiments/data/tiny.yaml", overrides)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "data"
    generate(tiny_config(), out)
    return out


@pytest.fixture(scope="session")
def movielens_src() -> Path:
    if not (MOVIELENS / "ratings.csv").is_file():
        pytest.skip(f"MovieLens not found at {MOVIELENS} (set GEMKD_MOVIELENS)")
    return MOVIELENS
