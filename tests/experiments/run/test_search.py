"""The equal-budget search (gemkd.experiments.run.search, DESIGN §6 "Fair comparison"): N trials per
study, resumable and deterministic, duplicates free, the grid covered, edges flagged; and what
the report makes of it (tuning.csv rows, edge sentences, plots)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gemkd.experiments.report.tuning_edges import edge_sentences
from gemkd.experiments.report.tuning_plots import write_tuning_plots
from gemkd.experiments.run.search import Search, SearchTuner, run_search, study_name
from gemkd.experiments.run.tuning_rows import TUNING_COLUMNS, tuning_rows
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import Categorical, IntRange, LogUniform, Uniform
from gemkd.transfer.methods.space import resolve

ALPHA = Uniform(0.0, 1.0, default=0.5, natural_low=True, natural_high=True)
SPACE = {"kd_weight": LogUniform(0.1, 100.0, default=1.0), "hidden": IntRange(4, 64, log=True),
         "pooling": Categorical(["mean", "attention"])}


def bowl(params: dict) -> float:
    """Smallest at λ = 3, hidden 16, mean pooling."""
    return ((math.log(params["kd_weight"]) - math.log(3.0)) ** 2
            + 0.1 * (math.log2(params.get("hidden", 16)) - 4) ** 2
            + (0.05 if params.get("pooling") == "attention" else 0.0))


class Counting:
    def __init__(self, fn=bowl):
        self.fn, self.calls = fn, []

    def __call__(self, params: dict) -> float:
        self.calls.append(params)
        return self.fn(params)


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_n_trials_per_study_the_defaults_first(tmp_path, sampler):
    score = Counting()
    search = Search(SPACE, sampler, 7, 0, tmp_path, "kd-lag0")
    run_search(search, score)
    assert len(search.trials()) == 7 and search.next() is None and search.done
    assert len(score.calls) == 7  # a continuous space: no duplicates to reuse
    assert score.calls[0] == {"hidden": 16, "kd_weight": 1.0, "pooling": "mean"}
    params, values = zip(*search.trials(), strict=True)
    assert list(params) == score.calls and search.best() == params[values.index(min(values))]
    assert (tmp_path / "kd-lag0.journal").exists()


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_a_killed_search_resumes_with_the_same_suggestions(tmp_path, sampler):
    whole = Search(SPACE, sampler, 12, 7, tmp_path / "a", "kd-lag0")
    run_search(whole, bowl)
    # the second run: killed after 5 trials with the 6th handed out but not told, while another
    # study of the same run dir advanced beside it; then resumed by a fresh process
    first = Search(SPACE, sampler, 12, 7, tmp_path / "b", "kd-lag0")
    other = Search(SPACE, sampler, 12, 7, tmp_path / "b", "kd_aux-lag0")
    for _ in range(5):
        params = first.next()
        first.tell(params, bowl(params))
        side = other.next()
        other.tell(side, bowl(side) + 1.0)
    interrupted = first.next()
    del first
    resumed = Search(SPACE, sampler, 12, 7, tmp_path / "b", "kd-lag0")
    assert resumed.next() == interrupted  # the interrupted trial again, not a new one
    score = Counting()
    run_search(resumed, score)
    assert len(score.calls) == 7  # the 5 completed trials were not trained again
    assert resumed.trials() == whole.trials()
    seed8 = Search(SPACE, sampler, 12, 8, tmp_path / "c", "kd-lag0")
    params = seed8.next()
    assert params == whole.trials()[0][0]  # trial 0: the defaults, whatever the seed
    seed8.tell(params, bowl(params))
    assert seed8.next() != whole.trials()[1][0]  # then another seed, other suggestions


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_the_seed_key_not_the_file_name_decides_the_suggestions(tmp_path, sampler):
    """The runner's study file carries a hash of the inputs and of gemkd's source; seeded by
    (variant, lag, world) alone, a source edit (a new hash) gives the same trials."""
    before = Search(SPACE, sampler, 8, 3, tmp_path, "kd-lag0-0123abcd", seed_key="kd-lag0")
    after = Search(SPACE, sampler, 8, 3, tmp_path, "kd-lag0-4567ef01", seed_key="kd-lag0")
    run_search(before, bowl)
    run_search(after, bowl)
    assert before.path != after.path and before.trials() == after.trials()
    other = Search(SPACE, sampler, 8, 3, tmp_path, "kd_aux-lag0-4567ef01", seed_key="kd_aux-lag0")
    run_search(other, bowl)
    assert [p for p, _ in other.trials()][1:] != [p for p, _ in before.trials()][1:]
    plain = Search(SPACE, sampler, 8, 3, tmp_path / "plain", "kd-lag0")  # seed_key = name
    run_search(plain, bowl)
    assert plain.trials() == before.trials()


def test_duplicates_are_not_scored_again(tmp_path):
    score = Counting(lambda p: {"mean": 0.9, "attention": 0.8}[p["pooling"]])
    search = Search({"pooling": Categorical(["mean", "attention"])}, "tpe", 6, 0, tmp_path, "r")
    run_search(search, score)
    assert len(search.trials()) == 6 and len(score.calls) == 2
    reused = [r for r in search.history() if r.reused_from is not None]
    assert len(reused) == 4 and all(r.value == search.history()[r.reused_from].value
                                    for r in reused)
    one = Counting()
    run_search(Search({"kd_weight": Categorical([3.0])}, "random", 5, 0, tmp_path, "one"), one)
    assert one.calls == [{"kd_weight": 3.0}]


def test_grid_covers_the_grid_then_repeats_for_free(tmp_path):
    space = {"kd_weight": Categorical([0.5, 2.0, 8.0]), "features": Categorical([[], ["ad"]])}
    score = Counting(lambda p: p["kd_weight"] + len(p["features"]))
    search = Search(space, "grid", 8, 0, tmp_path, "g")
    run_search(search, score)
    combos = sorted((p["kd_weight"], tuple(p["features"])) for p in score.calls)
    assert combos == sorted((w, f) for w in (0.5, 2.0, 8.0) for f in ((), ("ad",)))
    assert len(search.trials()) == 8 and search.best() == {"features": [], "kd_weight": 0.5}
    with pytest.raises(ConfigError, match="sampler grid needs a list of values for knob "
                                          "'kd_weight'"):
        Search({"kd_weight": LogUniform(0.1, 10.0)}, "grid", 4, 0, tmp_path, "bad")


def test_at_edge_flags_a_bound_that_is_not_natural(tmp_path):
    rising = lambda p: -math.log(p["kd_weight"])  # noqa: E731 - the larger the better
    search = Search({"kd_weight": LogUniform(0.1, 10.0)}, "tpe", 16, 0, tmp_path, "lam")
    run_search(search, rising)
    assert search.at_edge() == {"kd_weight": "high"}
    pure = lambda p: 1.0 - p["alpha"]  # noqa: E731 - α = 1 (pure distillation) is best
    for name, rng in (("a", ALPHA), ("b", resolve(ALPHA, [0.0, 0.5, 1.0]))):
        search = Search({"alpha": rng}, "tpe", 12, 0, tmp_path, name)
        run_search(search, pure)
        assert search.best()["alpha"] >= 0.95 and search.at_edge() == {}
    listed = Search({"kd_weight": Categorical([0.5, 2.0, 8.0])}, "grid", 3, 0, tmp_path, "c")
    run_search(listed, rising)
    assert listed.at_edge() == {"kd_weight": "high"}  # the top of the list: widen it


def test_tpe_finds_the_optimum_of_a_quadratic_in_log_lambda(tmp_path):
    search = Search({"kd_weight": LogUniform(0.1, 100.0, default=1.0)}, "tpe", 20, 0,
                    tmp_path, "q")
    best = run_search(search, bowl)
    assert abs(math.log(best["kd_weight"] / 3.0)) < math.log(1.5), best
    assert search.at_edge() == {}


def test_a_study_refuses_another_space_and_odd_tells(tmp_path):
    search = Search(SPACE, "tpe", 3, 0, tmp_path, study_name("kd", 3, 1))
    assert search.path.name == "kd-lag3-world1.journal"
    params = search.next()
    with pytest.raises(ValueError, match="does not answer"):
        search.tell({**params, "pooling": "other"}, 1.0)
    search.tell(params, float("nan"))  # a diverged student: a failed trial, never chosen
    assert math.isnan(search.trials()[0][1])
    with pytest.raises(LookupError, match="no trial has completed"):
        search.best()
    with pytest.raises(ConfigError, match="started with another space"):
        Search({"kd_weight": LogUniform(0.1, 10.0)}, "tpe", 3, 0, tmp_path,
               study_name("kd", 3, 1))
    with pytest.raises(ConfigError, match="started with another sampler"):
        Search(SPACE, "random", 3, 0, tmp_path, study_name("kd", 3, 1))


def test_a_torn_last_journal_line_is_dropped(tmp_path):
    search = Search(SPACE, "random", 4, 0, tmp_path, "t")
    params = search.next()
    search.tell(params, 1.0)
    with open(search.path, "ab") as f:
        f.write(b'{"op_code": 4, "worker_id"')  # killed mid-append
    again = Search(SPACE, "random", 4, 0, tmp_path, "t")
    assert again.trials() == [(params, 1.0)]
    run_search(again, bowl)
    assert len(again.trials()) == 4


def test_tuning_rows_sentences_and_plots(tmp_path):
    rows = []
    for lag in (0, 3):
        space = {"kd_weight": Categorical([0.5, 2.0, 8.0]),
                 "alpha": resolve(ALPHA, [0.0, 1.0])}  # natural ends: never at an edge
        search = Search(space, "grid", 6, 0, tmp_path / "tuning", study_name("kd", lag, 0))
        run_search(search, lambda p, lag=lag: -p["kd_weight"] - p["alpha"] - 0.01 * lag)
        rows += tuning_rows(search, "kd", lag, 0)
    rows += tuning_rows(Search({}, "tpe", 5, 0, tmp_path / "tuning", "baseline"), "baseline", 0)
    df = pd.DataFrame(rows, columns=TUNING_COLUMNS)
    assert len(df) == 2 * 6 * 2 and set(df.variant) == {"kd"}
    chosen = df[df.chosen]
    assert len(chosen) == 2 * 2 and set(chosen.trial.groupby(chosen.teacher_lag_days).nunique()) \
        == {1}
    assert (chosen[chosen.param == "kd_weight"].at_edge == "high").all()
    assert (chosen[chosen.param == "alpha"].value == 1.0).all()
    assert (chosen[chosen.param == "alpha"].at_edge == "").all()
    assert (df[~df.chosen].at_edge == "").all()
    csv = tmp_path / "tuning.csv"
    df.to_csv(csv, index=False)
    (sentence,) = edge_sentences(pd.read_csv(csv))
    assert sentence.startswith("at_edge: kd chose kd_weight at the high end of its searched "
                               "range in 2 of 2 studies (8 at lag 0, world 0; 8 at lag 3")
    assert edge_sentences(pd.DataFrame({"variant": ["kd"], "param": ["x"]})) == []
    (png,) = write_tuning_plots(pd.read_csv(csv), tmp_path / "plots", log_knobs={"kd_weight"})
    assert png.name == "tuning_kd.png" and png.read_bytes()[:4] == b"\x89PNG"


def test_tuners_in_rounds_match_the_serial_search(tmp_path):
    """A runner that trains one candidate per variant per round, interleaving the studies,
    gets what each study run alone gets; a space with nothing to choose asks for nothing."""
    alone = {n: Search(SPACE, "tpe", 6, 0, tmp_path / "alone", n) for n in ("kd", "kd_aux")}
    for search in alone.values():
        run_search(search, bowl)
    tuners = {n: SearchTuner(Search(SPACE, "tpe", 6, 0, tmp_path / "rounds", n))
              for n in ("kd", "kd_aux")}
    tuners["baseline"] = SearchTuner(Search({}, "tpe", 6, 0, tmp_path / "rounds", "baseline"))
    rounds = 0
    while asked := [(n, p) for n, t in tuners.items() for p in t.ask()]:
        rounds += 1
        for n, p in reversed(asked):  # told in another order than asked
            tuners[n].tell(p, bowl(p))
    assert rounds == 6 and tuners["baseline"].best() == {} and tuners["baseline"].scored() == []
    for n, search in alone.items():
        assert tuners[n].scored() == search.trials() and tuners[n].best() == search.best()
    fixed = SearchTuner(Search({"kd_weight": Categorical([2.0])}, "tpe", 4, 0, tmp_path, "one"))
    assert fixed.ask() == [] and fixed.best() == {"kd_weight": 2.0}


def test_tuning_seed_redraws_the_searches_with_the_training_seeds_kept():
    from gemkd.experiments.run.tuning import search_seed, validation_seeds
    from gemkd.experiments.spec import load_spec

    default = load_spec(None, [])
    assert search_seed(default) == default.seeds[0]
    assert "seed" not in default.tuning.to_dict()  # unset: an existing spec's tag is unchanged
    other = load_spec(None, ["tuning.seed=5"])
    assert search_seed(other) == 5 and other.tuning.to_dict()["seed"] == 5
    assert other.seeds == default.seeds and validation_seeds(other) == validation_seeds(default)
    assert other.tuning.knobs == default.tuning.knobs  # "seed" is not read as a knob
    with pytest.raises(ConfigError, match="seed"):
        load_spec(None, ["tuning.seed=abc"])
