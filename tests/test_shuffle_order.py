"""``pytest --shuffle-seed N`` (tests/conftest.py): a seed gives one order, files stay whole,
another seed gives another order, and no seed leaves the collection as it is."""

from __future__ import annotations

from types import SimpleNamespace

from tests.conftest import pytest_collection_modifyitems


def _items() -> list[SimpleNamespace]:
    return [SimpleNamespace(nodeid=f"tests/f{f}.py::test_{t}") for f in range(6)
            for t in range(5)]


def _order(seed: int | None) -> list[str]:
    items = _items()
    config = SimpleNamespace(getoption=lambda name: seed)
    pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
    return [i.nodeid for i in items]


def test_no_seed_keeps_the_collection_order():
    assert _order(None) == [i.nodeid for i in _items()]


def test_a_seed_shuffles_files_and_their_tests_the_same_way_every_time():
    once, again, other = _order(7), _order(7), _order(8)
    assert once == again and once != other
    assert sorted(once) == sorted(i.nodeid for i in _items())
    files = [n.split("::")[0] for n in once]
    runs = [f for k, f in enumerate(files) if k == 0 or files[k - 1] != f]
    assert len(runs) == len(set(files)) == 6  # each file's tests together
    assert runs != sorted(runs)  # files reordered
    first = [n for n in once if n.startswith(runs[0])]
    assert first != sorted(first)  # and the tests within a file
