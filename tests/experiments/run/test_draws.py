"""A search per final seed and a tuned baseline (DESIGN §6 "Fair comparison"): each final seed
trains with its own draw's choice, validated on seeds that are no final seed; the student's lr
(and EMA decay) is a knob of every variant, the baseline's included, with the defaults first;
``tuning.draws: shared`` keeps the earlier versions' single draw and keys; a killed run resumes
its searches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gemkd.experiments.run import executors
from gemkd.experiments.run.inputs import inputs_tag
from gemkd.experiments.run.jobs import InputPaths
from gemkd.experiments.run.methods import search_space
from gemkd.experiments.run.runner import count_work, run_experiment
from gemkd.experiments.run.search import Search
from gemkd.experiments.run.train_knobs import with_train_knobs
from gemkd.experiments.run.tuning import check_draws, planned_runs, validation_seeds
from gemkd.experiments.spec import load_spec
from gemkd.experiments.spec.run_spec import TuningSpec
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import Categorical, LogUniform, Uniform
from tests.faults.conftest import SPEC

DRAWS = {**SPEC, "name": "draws", "seeds": [0, 1], "variants": ["baseline", "kd"],
         "tuning": {"trials": 2, "knobs": {"kd_weight": [0.5, 2.0], "temperature": [1.0]}}}
RUNS = 2 * 2 * 2 + 2 * 2  # (baseline, kd) x 2 draws x 2 trials, then 2 final runs each


def spec_of(tmp_path: Path, sets: list[str] | None = None, base: dict = DRAWS):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(base))
    return load_spec(path, sets or [])


EXECUTE = executors.execute


class Killed(RuntimeError):
    pass


class Recorder:
    """Stands in for the executors' ``execute``: records each run, optionally dies at call
    ``kill_at`` (a kill part-way through the searches)."""

    def __init__(self, kill_at: int | None = None) -> None:
        self.runs: list = []
        self.kill_at = kill_at

    def __call__(self, run):
        if self.kill_at is not None and len(self.runs) + 1 == self.kill_at:
            raise Killed("killed")
        self.runs.append(run)
        return EXECUTE(run)


def ledger(out: Path) -> list[str]:
    return [json.loads(x)["key"] for x in (out / "runs.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("draws")
    spec = spec_of(tmp)
    recorder = Recorder()
    mp = pytest.MonkeyPatch()
    mp.setattr(executors, "execute", recorder)
    try:
        run_experiment(spec, tmp / "out", executor=executors.Serial(1))
    finally:
        mp.undo()
    return spec, tmp / "out", recorder.runs


def test_every_final_seed_trains_with_its_own_draws_choice(drawn):
    spec, out, runs = drawn
    assert len(runs) == RUNS == count_work(spec, True)[0]
    tuning = pd.read_csv(out / "tuning.csv")
    assert set(tuning.draw) == {0, 1}
    tune = [r for r in runs if r.phase == "tune"]
    assert {r.seed for r in tune} == {1000, 1001}  # s + 1000: never a final seed
    for draw in (0, 1):
        rows = tuning[tuning.draw == draw]
        for variant in ("baseline", "kd"):
            mine = rows[rows.variant == variant]
            trials = {t: dict(zip(g.param, g.value, strict=True))
                      for t, g in mine.groupby("trial")}
            # the draw's candidates were trained on its own validation seed
            scored = [r.params for r in tune if r.variant == variant and r.seed == 1000 + draw]
            assert [{k: float(v) for k, v in p.items()} for p in scored] == \
                [trials[t] for t in sorted(trials)]
            (final,) = [r for r in runs if r.phase == "final" and r.variant == variant
                        and r.seed == draw]
            chosen = mine[mine.chosen]
            assert final.params == dict(zip(chosen.param, chosen.value, strict=True))
    # the two draws of a variant are two searches: trial 1 differs
    second = tuning[(tuning.trial == 1) & (tuning.param == "lr")]
    assert second.groupby("variant").value.nunique().to_dict() == {"baseline": 2, "kd": 2}
    studies = sorted(p.name.split("-")[3] for p in (out / "tuning").glob("*.journal"))
    assert studies == ["seed0", "seed0", "seed1", "seed1"]


def test_the_baseline_is_searched_over_lr_from_the_defaults(drawn):
    spec, out, _ = drawn
    tuning = pd.read_csv(out / "tuning.csv")
    base = tuning[tuning.variant == "baseline"]
    assert set(base.param) == {"lr"} and len(base) == 2 * spec.tuning.trials
    first = tuning[tuning.trial == 0]  # every draw's trial 0: today's untuned run
    assert (first[first.param == "lr"].value == spec.lr).all() and len(first) == 2 + 2 * 3
    assert set(first[first.param == "kd_weight"].value) == {0.5}
    lrs = base.value.astype(float)
    assert ((lrs >= spec.lr / 4) & (lrs <= spec.lr * 4)).all()


def test_a_killed_run_resumes_its_searches(drawn, tmp_path, monkeypatch):
    spec, whole, _ = drawn
    out = tmp_path / "out"
    shutil.copytree(whole / "cache", out / "cache")  # the data and teacher steps: reused
    monkeypatch.setattr(executors, "execute", Recorder(kill_at=6))  # inside round two
    with pytest.raises(Killed):
        run_experiment(spec, out, executor=executors.Serial(1))
    assert len(ledger(out)) == 5
    again = Recorder()
    monkeypatch.setattr(executors, "execute", again)
    run_experiment(spec, out, executor=executors.Serial(1))
    assert len(again.runs) == RUNS - 5  # the finished runs were not trained again
    keys = ledger(out)
    assert len(set(keys)) == len(keys) == RUNS
    for name in ("tuning.csv", "results.csv"):
        got, want = pd.read_csv(out / name), pd.read_csv(whole / name)
        timing = [c for c in ("train_seconds", "examples_per_second") if c in want]
        pd.testing.assert_frame_equal(got.drop(columns=timing), want.drop(columns=timing))


def test_validation_seeds_are_never_final_seeds(tmp_path):
    spec = spec_of(tmp_path, ["seeds=[0, 1, 2]", "tuning.seeds=2"])
    seen = [s for d in spec.seeds for s in validation_seeds(spec, d)]
    assert seen == [1000, 2000, 1001, 2001, 1002, 2002]
    check_draws(spec)
    with pytest.raises(ConfigError, match=r"1000 is a final seed and also a validation seed "
                                          r"of seed 0's search"):
        check_draws(spec_of(tmp_path, ["seeds=[0, 1000]"]))
    with pytest.raises(ConfigError, match="2000 is a final seed"):
        check_draws(spec_of(tmp_path, ["seeds=[0, 2000]", "tuning.seeds=2"]))
    shared = spec_of(tmp_path, ["seeds=[0, 1000]", "tuning.draws=shared"])
    check_draws(shared)  # one search, scored on the first seed, as earlier versions did
    assert validation_seeds(shared) == [0]
    with pytest.raises(ConfigError, match=r"key 'draws': expected one of \['per_seed', 'shared'\]"):
        spec_of(tmp_path, ["tuning.draws=each"])


def test_the_students_knobs_and_their_ranges(tmp_path):
    spec = spec_of(tmp_path, ["ema_decay=0.98"])
    space = search_space(spec, spec.variant("baseline"))
    assert set(space) == {"lr", "ema_decay"}
    lr, ema = space["lr"], space["ema_decay"]
    assert isinstance(lr, LogUniform) and (lr.low, lr.high, lr.default) == (
        pytest.approx(spec.lr / 4), pytest.approx(spec.lr * 4), spec.lr)
    assert isinstance(ema, Uniform) and (ema.low, ema.high, ema.default) == (0.9, 0.995, 0.98)
    search = Search(space, "tpe", 4, 0, tmp_path / "tuning", "baseline")
    assert search.next() == {"ema_decay": 0.98, "lr": spec.lr}  # trial 0: the defaults
    assert set(search_space(spec, spec.variant("kd"))) == {"ema_decay", "kd_weight", "lr",
                                                            "temperature"}
    listed = spec_of(tmp_path, ["tuning.knobs.lr=[0.005, 0.02]"])
    assert search_space(listed, listed.variant("baseline"))["lr"] == Categorical([0.005, 0.02])
    assert "ema_decay" not in search_space(listed, listed.variant("baseline"))  # ema off
    no_ema = spec_of(tmp_path, ["tuning.knobs.ema_decay=[0.9]"])
    with pytest.raises(ConfigError, match="'ema_decay' searches the EMA decay"):
        search_space(no_ema, no_ema.variant("baseline"))
    bad = spec_of(tmp_path, ["tuning.knobs.lr={low: 0, high: 0.1, log: false}"])
    with pytest.raises(ConfigError, match=r"knob 'lr' Uniform\(0, 0.1\): 0 is not a valid lr"):
        search_space(bad, bad.variant("baseline"))
    wide = spec_of(tmp_path, ["ema_decay=0.999"])
    assert search_space(wide, wide.variant("baseline"))["ema_decay"].high == 0.999
    run = with_train_knobs(spec, {"lr": 0.02, "ema_decay": 0.95, "kd_weight": 2.0})
    assert (run.lr, run.ema_decay, spec.lr, spec.ema_decay) == (0.02, 0.95, 0.01, 0.98)
    assert with_train_knobs(spec, {"kd_weight": 2.0}) is spec


def test_run_counts_per_draw_and_shared(tmp_path):
    quick = load_spec(None, ["robustness.perturb=null"])  # the repeat: test_perturbed.py
    n = len(quick.seeds)  # the quickstart's final seeds: one draw each
    assert count_work(quick, True)[0] == 7 * n * 8 + 7 * n  # every variant: n draws x 8
    old = load_spec(None, ["tuning.draws=shared", "robustness.perturb=null"])
    assert count_work(old, True)[0] == 6 * 8 + 7 * n  # the baseline untuned, one draw
    assert planned_runs(old, old.variant("baseline")) == 0
    assert search_space(old, old.variant("baseline")) == {}
    named = load_spec(None, ["tuning.draws=shared", "tuning.knobs.lr=[0.01, 0.02]"])
    assert planned_runs(named, named.variant("baseline")) == 2  # searched: it is named
    spec = spec_of(tmp_path, ["tuning.seeds=2"])
    assert planned_runs(spec, spec.variant("kd")) == 2 * 2 * 2  # trials x seeds x draws


def test_shared_draws_keep_the_earlier_tags(tmp_path, monkeypatch):
    """A shared-draw spec hashes as the same spec did before ``draws`` existed: its studies
    and runs.jsonl keys are the ones earlier versions wrote (at the same source)."""
    shared = spec_of(tmp_path, ["tuning.draws=shared"])
    inputs = InputPaths({"gem": tmp_path / "store-aaa" / "store"})
    tag = inputs_tag(shared, inputs, 1)
    assert shared.tuning.to_dict()["draws"] == "shared"  # spec.yaml still says so
    per_seed = inputs_tag(spec_of(tmp_path), inputs, 1)
    before = TuningSpec.to_dict
    monkeypatch.setattr(TuningSpec, "to_dict", lambda self: {
        k: v for k, v in before(self).items() if k != "draws"})
    assert inputs_tag(shared, inputs, 1) == tag != per_seed


def test_a_method_knob_may_not_take_a_training_knobs_name(tmp_path, monkeypatch):
    from gemkd.transfer.methods.kd import KD

    monkeypatch.setitem(KD.__dict__["tunable"], "lr", LogUniform(0.001, 0.1))
    spec = spec_of(tmp_path)
    with pytest.raises(ConfigError, match="a method tunes 'lr', which names the student's"):
        search_space(spec, spec.variant("kd"))
