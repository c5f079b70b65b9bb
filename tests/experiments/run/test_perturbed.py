"""``robustness: {perturb: ulp}``: every search and final run repeated with the students' initial
weights moved by one ulp, into ``RUN_DIR/perturbed`` under keys of its own, and read back by the
report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from gemkd.experiments.cli import main
from gemkd.experiments.run.inputs import inputs_tag
from gemkd.experiments.run.jobs import InputPaths
from gemkd.experiments.run.runner import count_work
from gemkd.experiments.spec import load_spec
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.training.ulp_perturb import perturb_weights


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(50, 4), torch.nn.Linear(4, 3))
    with torch.no_grad():
        net[1].bias[0] = 0.0
    net[0].weight.requires_grad_(True)
    return net


def test_every_nonzero_weight_moves_one_ulp_drawn_from_the_seed():
    net, same, other = _net(), _net(), _net()
    before = [p.detach().clone() for p in net.parameters()]
    state = torch.random.get_rng_state()
    moved = perturb_weights(net, "ulp", 3)
    assert torch.equal(torch.random.get_rng_state(), state)  # the run's own draws untouched
    assert moved == sum(int((b != 0).sum()) for b in before)
    ups = []
    for b, p in zip(before, net.parameters(), strict=True):
        nonzero = b != 0
        assert torch.equal(p[~nonzero], b[~nonzero])  # zeros stay zero (no denormals)
        step = torch.nextafter(b, torch.full_like(b, math.inf))
        down = torch.nextafter(b, torch.full_like(b, -math.inf))
        up = p == step
        assert bool((up | (p == down))[nonzero].all())  # exactly one ulp, either way
        ups.append(up[nonzero])
    share = float(torch.cat(ups).float().mean())
    assert 0.3 < share < 0.7  # both directions, drawn
    perturb_weights(same, "ulp", 3)
    perturb_weights(other, "ulp", 4)
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), same.parameters(),
                                                  strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(net.parameters(), other.parameters(),
                                                      strict=True))
    with pytest.raises(ValueError, match="perturbation 'bits'"):
        perturb_weights(net, "bits", 0)


def test_the_repeat_leaves_the_main_runs_keys_alone_and_doubles_the_student_runs():
    robust = load_spec(None, [])  # the quickstart repeats
    plain = load_spec(None, ["robustness.perturb=null"])
    assert "robustness" not in plain.to_dict() and robust.to_dict()["robustness"] == {
        "perturb": "ulp"}
    inputs = InputPaths({"gem": Path("/cache/store-abc/store")}, Path("/cache/codes-d/codes"))
    assert inputs_tag(plain, inputs, 1) == inputs_tag(robust, inputs, 1)
    assert count_work(robust, True)[0] == 2 * count_work(plain, True)[0]
    assert count_work(robust, True)[1] == count_work(plain, True)[1]  # the steps are shared
    with pytest.raises(ConfigError, match="robustness"):
        load_spec(None, ["robustness.perturb=threads"])


SPEC = {
    "name": "tinyrobust", "seeds": [0, 1, 2], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 32, "max_steps": 30}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [16]}},
    "student_tasks": ["click"], "variants": ["baseline", "kd"],
    "tuning": {"trials": 2, "knobs": {"kd_weight": [0.5, 2.0], "temperature": [1.0]}},
    "bootstrap": {"samples": 100},
    "robustness": {"perturb": "ulp"},
}


@pytest.mark.slow
def test_the_repeat_is_run_into_its_own_ledger_and_read_by_the_report(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    assert main(["run", str(spec), "--out", str(out)]) == 0
    rep = out / "perturbed"
    for name in ("run.json", "spec.yaml", "runs.jsonl", "results.csv", "tuning.csv"):
        assert (rep / name).is_file(), name
    assert not (rep / "cache").exists()  # the teacher, store and codes are the main run's
    main_keys = [json.loads(x)["key"] for x in (out / "runs.jsonl").read_text().splitlines()]
    rep_lines = [json.loads(x) for x in (rep / "runs.jsonl").read_text().splitlines()]
    assert len(rep_lines) == len(main_keys) and not set(main_keys) & {r["key"] for r in rep_lines}
    assert {k.split("|")[0] for k in main_keys} == {r["key"].split("|")[0] for r in rep_lines} \
        == {"tune", "final"}
    # the repeat's teacher sums are the main run's; its students' are its own
    folder = Path("clusters/world=0/lag=0")
    assert (rep / folder / "teacher__gem.npz").read_bytes() == \
        (out / folder / "teacher__gem.npz").read_bytes()
    assert sorted(p.name for p in (rep / folder).glob("kd__seed*.npz")) == [
        f"kd__seed{s}.npz" for s in SPEC["seeds"]]
    a, b = (pd.read_csv(d / "results.csv").set_index(["variant", "seed", "domain", "task"])
            .sort_index() for d in (out, rep))
    assert a.index.equals(b.index)
    assert not (a["ne"] == b["ne"]).all()  # one ulp of the weights moves the numbers ...
    assert ((a["ne"] - b["ne"]).abs() < 0.05).all()  # ... by little
    assert "-- perturbed:" in (out / "log.txt").read_text()
    # the report compares the two families: every primary verdict holds or is fragile
    table = pd.read_csv(out / "intervals.csv", keep_default_na=False)
    family = table[table["gain_family"] == "primary"]
    assert list(family["variant"]) == ["kd"]
    assert family["gain_robustness"].iloc[0] in ("holds", "fragile")
    report = (out / "report.md").read_text()
    assert "## Verdict robustness" in report and "| kd vs baseline |" in report
    # a rerun reuses both ledgers
    sizes = [(d / "runs.jsonl").stat().st_size for d in (out, rep)]
    capsys.readouterr()
    assert main(["run", str(spec), "--out", str(out)]) == 0
    assert [(d / "runs.jsonl").stat().st_size for d in (out, rep)] == sizes
    pd.testing.assert_frame_equal(pd.read_csv(rep / "results.csv").set_index(
        ["variant", "seed", "domain", "task"]).sort_index(), b)
