"""Training base rates, pooled and per domain, against a pandas group-by of the Parquet files;
the teacher's per-domain NE rows use their domain's own rate."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from gemkd.experiments.teacher.teacher_config import build_run, load_teacher_config
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.training import training_base_rates, training_rates

ROOT = Path(__file__).resolve().parents[3]


def _labels(data: Path, days: tuple[int, int], tasks: list[str]) -> pd.DataFrame:
    frames = [pq.read_table(path, columns=["day", "domain", *tasks]).to_pandas()
              for day in range(*days) for path in sorted((data / f"day={day}").glob("*.parquet"))]
    return pd.concat(frames, ignore_index=True)


def test_rates_match_a_group_by_of_the_files(tiny_data):
    schema = DatasetSchema.load(tiny_data)
    tasks, days = list(schema.tasks), (0, 4)
    frame = _labels(tiny_data, days, tasks)
    by_domain = frame.groupby("domain")[tasks].mean()
    pooled_once, rates = training_rates(tiny_data, days, tasks)
    assert set(rates) == set(tasks)
    for t in tasks:
        assert set(rates[t]) == {schema.domains[d] for d in by_domain.index}
        for d, row in by_domain.iterrows():
            assert rates[t][schema.domains[d]] == pytest.approx(row[t], rel=1e-12)
    pooled = training_base_rates(tiny_data, days, tasks)
    assert pooled == pytest.approx(frame[tasks].mean().to_dict(), rel=1e-12)
    assert pooled_once == pooled  # the same pass gives both
    # the domains differ (else the per-domain rows would not need their own)
    assert by_domain["click"].max() - by_domain["click"].min() > 0.01


def test_only_the_chosen_domains_get_a_rate(tiny_data):
    schema = DatasetSchema.load(tiny_data)
    one = schema.domains[1]
    _, rates = training_rates(tiny_data, (0, 4), list(schema.tasks), [one])
    assert all(set(r) == {one} for r in rates.values())
    pooled = training_base_rates(tiny_data, (0, 4), list(schema.tasks), [one])
    assert {t: r[one] for t, r in rates.items()} == pytest.approx(pooled, rel=1e-12)


def test_a_teachers_domain_rows_use_their_own_rate(tiny_data):
    cfg = load_teacher_config(ROOT / "experiments/teacher/configs/tiny.yaml", {"max_seq_len": 32})
    _, module = build_run(cfg, tiny_data)
    tasks = list(module.tasks)
    _, expected = training_rates(tiny_data, cfg.train_days, tasks)
    assert module.domain_base_rates == expected
    metrics = module.val_metrics
    for t, task in enumerate(tasks):
        for d, dom in enumerate(module.domains):
            assert metrics.domain_base_rates[t][d] == expected[task][dom]
        assert not math.isnan(metrics.base_rates[t])
