"""Batched asks of the equal-budget search (``tuning.batch``): a search asks for several
candidates at once (TPE's constant liar), hands the same ones out again until they are told
(a killed run resumes them), keeps its budget of trials, and a duplicate costs no run; a batch
of one is the one-at-a-time search, trial for trial."""

from __future__ import annotations

import math

import pytest

from gemkd.experiments.run.search import Search, SearchTuner, run_search
from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import Categorical, IntRange, LogUniform

SPACE = {"kd_weight": LogUniform(0.1, 100.0, default=1.0), "hidden": IntRange(4, 64, log=True)}


def bowl(params: dict) -> float:
    return (math.log(params["kd_weight"]) - math.log(3.0)) ** 2 \
        + 0.1 * (math.log2(params["hidden"]) - 4) ** 2


def drive(search: Search, batch: int) -> list[list[dict]]:
    """Rounds of ``batch`` asks, each told its score; the rounds' candidates."""
    tuner, rounds = SearchTuner(search, batch), []
    while asked := tuner.ask():
        rounds.append(asked)
        for params in asked:
            tuner.tell(params, bowl(params))
    return rounds


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_a_batch_of_one_is_the_one_at_a_time_search(tmp_path, sampler):
    serial = Search(SPACE, sampler, 8, 3, tmp_path / "a", "kd-lag0")
    run_search(serial, bowl)
    batched = Search(SPACE, sampler, 8, 3, tmp_path / "b", "kd-lag0")
    rounds = drive(batched, 1)
    assert [len(r) for r in rounds] == [1] * 8
    assert batched.trials() == serial.trials()


def test_batches_keep_the_budget_defaults_first_and_distinct(tmp_path):
    search = Search(SPACE, "tpe", 8, 0, tmp_path, "kd-lag0")
    rounds = drive(search, 3)
    assert [len(r) for r in rounds] == [3, 3, 2]  # 8 trials, never more
    assert rounds[0][0] == {"hidden": 16, "kd_weight": 1.0}  # trial 0: the defaults
    flat = [p for r in rounds for p in r]
    assert len({tuple(sorted(p.items())) for p in flat}) == 8
    assert [p for p, _ in search.trials()] == flat and search.done
    assert search.best() == min(flat, key=bowl)


def test_a_killed_batch_is_handed_out_again(tmp_path):
    whole = Search(SPACE, "tpe", 8, 5, tmp_path / "a", "kd-lag0")
    want = drive(whole, 4)
    first = Search(SPACE, "tpe", 8, 5, tmp_path / "b", "kd-lag0")
    asked = first.next_batch(4)
    assert asked == want[0] and first.next_batch(4) == asked  # out until told
    first.tell(asked[2], bowl(asked[2]))  # one told, then killed
    resumed = Search(SPACE, "tpe", 8, 5, tmp_path / "b", "kd-lag0")
    again = resumed.next_batch(4)
    assert again[:3] == [asked[0], asked[1], asked[3]]  # the three still out come back first
    with pytest.raises(ValueError, match="does not answer"):
        resumed.tell({"hidden": 5, "kd_weight": 0.2}, 1.0)


def test_a_duplicate_within_a_batch_waits_for_its_twin(tmp_path):
    space = {"pooling": Categorical(["mean", "attention"])}
    search = Search(space, "random", 6, 0, tmp_path, "pool")
    asked = search.next_batch(6)
    assert len(asked) == len({p["pooling"] for p in asked}) <= 2  # duplicates not handed out
    for p in asked:
        search.tell(p, {"mean": 1.0, "attention": 2.0}[p["pooling"]])
    assert search.next_batch(6) == [] and search.done  # 6 trials, at most 2 trained
    assert sorted(v for _, v in search.trials()) == sorted(
        {"mean": 1.0, "attention": 2.0}[p["pooling"]] for p, _ in search.trials())


def test_an_exhausted_grid_waits_for_its_points(tmp_path):
    space = {"pooling": Categorical(["mean", "attention"])}
    search = Search(space, "grid", 5, 0, tmp_path, "pool")
    asked = search.next_batch(4)
    assert sorted(p["pooling"] for p in asked) == ["attention", "mean"]
    for p in asked:
        search.tell(p, 1.0 if p["pooling"] == "mean" else 2.0)
    assert search.next_batch(4) == [] and search.done and search.best() == {"pooling": "mean"}


def test_a_small_int_range_spends_its_budget_on_duplicates_for_free(tmp_path):
    search = Search({"hidden": IntRange(4, 8)}, "tpe", 8, 0, tmp_path, "h")
    tuner, trained = SearchTuner(search, 4), []
    while asked := tuner.ask():
        trained += asked
        for p in asked:
            tuner.tell(p, abs(p["hidden"] - 6))
    assert search.done and len(search.trials()) == 8
    assert len(trained) == len({p["hidden"] for p in trained}) <= 5  # each value trained once
    assert all(v == abs(p["hidden"] - 6) for p, v in search.trials())


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_spec_batch_must_be_a_positive_int(bad):
    with pytest.raises(ConfigError, match="key 'batch'"):
        spec_from_mapping({"tuning": {"batch": bad}})


def test_spec_batch_one_leaves_the_tag_as_it_was():
    assert "batch" not in spec_from_mapping({}).to_dict()["tuning"]
    assert spec_from_mapping({"tuning": {"batch": 4}}).to_dict()["tuning"]["batch"] == 4
