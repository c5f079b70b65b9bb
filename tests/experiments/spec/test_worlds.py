"""A run replicated over synthetic worlds (``data.seeds``): one data step, teacher and set of
student runs per world, results and per-user evaluation sums labelled by world."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.clusters import load_clusters
from tests.faults.conftest import SPEC, gemkd_run

WORLDS = {**SPEC, "name": "worlds", "data": {**SPEC["data"], "seeds": [11, 12]}}


def test_each_world_is_its_own_replicate(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(WORLDS))
    out = tmp_path / "out"
    assert gemkd_run(spec, out) == 0
    df = pd.read_csv(out / "results.csv")
    assert sorted(set(df.world)) == [11, 12]
    assert len(df) == 2 * 2 * 4  # worlds x variants x (3 domains + all), one seed, one task
    base = df[(df.variant == "baseline") & (df.domain == "all")].set_index("world")["ne"]
    assert base[11] != base[12]  # different worlds, different data
    assert len(list(out.glob("cache/data-*/DONE"))) == 2
    assert len(list(out.glob("cache/teacher-*/DONE"))) == 2
    for world in (11, 12):
        folder = out / "clusters" / f"world={world}" / "lag=0"
        names = sorted(p.stem for p in folder.glob("*.npz"))
        assert names == ["baseline__seed0", "kd__seed0", "teacher__gem"]
        c = load_clusters(folder / "kd__seed0.npz")
        # NE from the per-user sums equals the run's own NE on the domain-all row, within the
        # files' float32 rounding of each sum (2^-24 of it)
        p = c["base_rate"][0]
        loss = c["loss"][:, 0].astype(np.float64).sum()
        ne = loss / c["n"][:, 0].sum() / -(p * np.log(p) + (1 - p) * np.log(1 - p))
        row = df[(df.world == world) & (df.variant == "kd") & (df.domain == "all")]
        assert ne == pytest.approx(float(row["ne"].iloc[0]), rel=2.0**-24 + 1e-9)
    log = (out / "log.txt").read_text()
    assert "=== world 11" in log and "=== world 12" in log


def test_world_seeds_only_for_the_synthetic_world():
    from gemkd.experiments.spec import spec_from_mapping

    with pytest.raises(ConfigError, match="key 'seeds' replicates the synthetic world"):
        spec_from_mapping({**SPEC, "data": {"source": "movielens", "seeds": [1, 2]}})
    with pytest.raises(ConfigError, match="'overrides.seed' or its replicates as 'seeds'"):
        spec_from_mapping({**SPEC, "data": {**SPEC["data"], "seeds": [1, 2],
                                            "overrides": {"seed": 3}}})
    with pytest.raises(ConfigError, match="each once"):
        spec_from_mapping({**SPEC, "data": {**SPEC["data"], "seeds": [1, 1]}})


def test_adding_a_world_reuses_the_others_runs(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**WORLDS, "data": {**SPEC["data"], "seeds": [11]}}))
    out = tmp_path / "out"
    assert gemkd_run(spec, out) == 0
    spec.write_text(yaml.safe_dump(WORLDS))  # worlds 11 and 12
    capsys.readouterr()
    assert gemkd_run(spec, out) == 0
    log = capsys.readouterr().out
    assert "[cached] baseline seed 0 (runs.jsonl)" in log  # world 11's, reused
    assert log.count("baseline        seed 0: NE") == 1  # world 12's, trained
    assert sorted(set(pd.read_csv(out / "results.csv").world)) == [11, 12]
