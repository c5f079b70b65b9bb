"""Shared fixtures: small generated datasets and the real MovieLens / KuaiRand logs the
repository ships in datasets/."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gemkd.transfer.config import load_dataclass
from gemkd.transfer.data.synth import SynthConfig, generate

ROOT = Path(__file__).resolve().parents[1]
MOVIELENS = ROOT / "datasets" / "movielens_latest_small"
KUAIRAND = ROOT / "datasets" / "kuairand_pure_slice"
KUAIRAND_MAPPING = ROOT / "experiments" / "data" / "mappings" / "kuairand.yaml"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shuffle-seed", type=int, default=None, metavar="N",
                     help="run the tests in an order drawn from seed N (test files shuffled, "
                          "and the tests within each): finds tests that depend on the order "
                          "they run in. Off by default.")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--shuffle-seed N``: the files in a random order and each file's tests in a random
    order (a file's tests stay together, so its module fixtures are built once)."""
    seed = config.getoption("--shuffle-seed")
    if seed is None:
        return
    rng = random.Random(seed)
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    files = list(by_file)
    rng.shuffle(files)
    for name in files:
        rng.shuffle(by_file[name])
    items[:] = [item for name in files for item in by_file[name]]


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.getoption("--shuffle-seed")
    return None if seed is None else f"shuffle-seed: {seed} (rerun with the same seed)"


def tiny_config(**overrides) -> SynthConfig:
    return load_dataclass(SynthConfig, ROOT / "experiments/data/tiny.yaml", overrides)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "data"
    generate(tiny_config(), out)
    return out


@pytest.fixture(scope="session")
def movielens_src() -> Path:
    """The shipped ml-latest-small (Parquet): part of the checkout, so never skipped."""
    assert (MOVIELENS / "ratings.parquet").is_file(), f"{MOVIELENS}: ratings.parquet missing"
    return MOVIELENS


@pytest.fixture(scope="session")
def kuairand_src() -> Path:
    """The shipped KuaiRand-Pure slice (Parquet): part of the checkout, so never skipped."""
    assert any(KUAIRAND.glob("log_standard*.parquet")), f"{KUAIRAND}: no log_standard*.parquet"
    return KUAIRAND


def dataset_table(root: Path):
    """Every row of a gemkd dataset as one Arrow table, days in numeric order."""
    import pyarrow as pa

    from gemkd.transfer.data.dataset_writer import read_day
    from gemkd.transfer.data.schema import DatasetSchema

    schema = DatasetSchema.load(root)
    return pa.concat_tables([read_day(root, d) for d in schema.days])


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny ops on shared cores: one torch thread is several times faster than oversubscribing.
    A module opts in with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", autouse=True)
def _serial_sweeps():
    """``gemkd run`` without ``--workers`` trains its student runs side by side on every core;
    the tests' tiny sweeps would spend more on starting workers than on training, so they run
    serially unless a test asks for workers (tests/experiments/run/test_fanout.py). Session
    scope: set up before any session fixture, whose runs (tests/faults' ``tiny_run``) would
    otherwise start a pool, and with it a forkserver that outlives them in pytest."""
    from gemkd.experiments.run import executors

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(executors, "default_workers", lambda threads: 1)
        yield


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """Every test leaves SIGINT's and SIGTERM's handlers as it found them. A handler that
    outlived its test (Ray's ``init`` makes SIGTERM raise ``SystemExit(15)``) turned a CI time
    limit's SIGTERM into a failure inside whichever test ran next, and the suite carried on. A
    leak is put right here and reported as a warning naming the test's handler."""
    import signal
    import warnings

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in before.items():
        now = signal.getsignal(s)
        if now is not handler and handler is not None:
            signal.signal(s, handler)
            warnings.warn(f"the test left {signal.Signals(s).name} handled by {now!r}; "
                          "restored", stacklevel=1)
