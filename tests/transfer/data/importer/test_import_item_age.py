"""Trap (a) of the first real log: sampled negatives drawn only from items already seen made a
brand-new item never a negative, so on a clicks-only news log item novelty alone told clicks
from negatives. Negatives can now be items new at that time (a look-ahead of item availability),
popularity counts a recent window, and the import measures and reports the item-age gap."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.data.importer.item_age import item_age_caveat
from gemkd.transfer.data.schema import DatasetSchema
from tests.conftest import dataset_table

T0 = 1_700_000_000
HOUR = 3600
MAPPING = {
    "source": "news",
    "time": {"column": "t", "unit": "s"},
    "days": {"calendar": "UTC"},
    "user": "user",
    "item": "article",
    "labels": {"click": {"column": "t", "op": ">", "value": 0}},
    "negatives": {"per_positive": 4, "from": "popularity", "seed": 0},
}


def news(n: int = 6000, n_items: int = 240, n_users: int = 400, seed: int = 0) -> pd.DataFrame:
    """A clicks-only news log: an article is published every 10 minutes over 40 hours and is
    clicked at a rate that halves every 1.4 hours after it appears, so most clicks are on fresh
    articles and an article's first click is its first row."""
    rng = np.random.default_rng(seed)
    published = 600 * np.arange(n_items)
    t = np.sort(rng.integers(0, 42 * HOUR, n))
    age = t[:, None] - published[None, :]
    w = np.where(age >= 0, np.exp(-np.maximum(age, 0) / (2 * HOUR)), 0.0)
    cum = np.cumsum(w, axis=1)
    article = (cum < rng.random(n)[:, None] * cum[:, -1:]).sum(axis=1)
    return pd.DataFrame({"t": T0 + t, "user": rng.integers(0, n_users, n),
                         "article": 1000 + article})


def imported(tmp_path: Path, capsys, negatives: dict | None = None, name: str = "out"
             ) -> tuple[DatasetSchema, pd.DataFrame, str, str]:
    m = copy.deepcopy(MAPPING)
    m["negatives"].update(negatives or {})
    src = tmp_path / f"{name}-src"
    src.mkdir(parents=True)
    news().to_csv(src / "log.csv", index=False)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    out = tmp_path / name
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(out)]) == 0
    printed = capsys.readouterr()
    return DatasetSchema.load(out), dataset_table(out).to_pandas(), printed.out, printed.err


def ages(t: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each row's item age in seconds (row time − the item's first logged row), and whether the
    row is a sampled negative."""
    logged = t[t["sampled"] == 0]
    first = logged.groupby("item_id")["ts"].min()
    age = t["ts"].to_numpy() - first.reindex(t["item_id"]).to_numpy()
    return age, t["sampled"].to_numpy() == 1


def new_share(age: np.ndarray, hours: float = 1.0) -> float:
    return float((age < hours * HOUR).mean())


def test_negatives_can_be_new_items(tmp_path, capsys):
    """With the defaults (popularity over the last 24 h, a look-ahead of 1 h) some negatives
    are articles first logged after their row, never more than the look-ahead after; on a log
    whose articles age in hours a day's popularity still favours older articles, and the import
    says so."""
    schema, t, out, err = imported(tmp_path, capsys)
    age, neg = ages(t)
    pos_new, neg_new = new_share(age[~neg]), new_share(age[neg])
    assert pos_new > 0.4  # the log's premise: many clicks are on articles under an hour old
    assert (age[neg] < 0).mean() > 0.005 and age[neg].min() >= -HOUR
    assert schema.negatives["window_hours"] == 24.0 and schema.negatives["lookahead_hours"] == 1.0
    item_age = schema.negatives["item_age"]
    assert item_age["hours"] == 1.0
    assert item_age["positives"] == pytest.approx(pos_new, abs=1e-9)
    assert item_age["negatives"] == pytest.approx(neg_new, abs=1e-9)
    caveat = item_age_caveat(schema.negatives)
    assert "a shorter negatives.window_hours" in caveat and f"note: negatives: {caveat}" in out


def test_a_short_window_matches_the_positives_item_age(tmp_path, capsys):
    """Popularity over the last half hour (shorter than an article's life) with the look-ahead:
    negatives are on new articles about as often as clicks are, and there is no caveat."""
    schema, t, out, err = imported(tmp_path, capsys, {"window_hours": 0.5})
    age, neg = ages(t)
    pos_new, neg_new = new_share(age[~neg]), new_share(age[neg])
    assert abs(neg_new - pos_new) < 0.2 * pos_new, (pos_new, neg_new)
    assert schema.negatives["item_age"]["negatives"] == pytest.approx(neg_new, abs=1e-9)
    assert item_age_caveat(schema.negatives) == ""
    assert "first logged under" not in out and "first logged under" not in err


def test_without_look_ahead_and_window_the_gap_is_measured_and_reported(tmp_path, capsys,
                                                                          caplog):
    """The old sampler (every earlier row, no look-ahead) on the same log: a new article is
    never a negative, and the import says so on stdout (a note), on stderr (a warning) and in
    schema.json, where the report's caveat reads it."""
    with caplog.at_level(logging.WARNING):
        schema, t, out, err = imported(tmp_path, capsys,
                                       {"window_hours": None, "lookahead_hours": 0})
    age, neg = ages(t)
    assert age[neg].min() >= 0  # nothing first logged after the row
    pos_new, neg_new = new_share(age[~neg]), new_share(age[neg])
    assert neg_new < pos_new / 3, (pos_new, neg_new)
    item_age = schema.negatives["item_age"]
    assert item_age["negatives"] == pytest.approx(neg_new, abs=1e-9)
    caveat = item_age_caveat(schema.negatives)
    assert f"{100 * pos_new:.1f} % of positives" in caveat
    assert f"{100 * neg_new:.1f} % of sampled negatives" in caveat
    assert "first logged under 1 h before their row" in caveat and "novelty" in caveat
    assert f"note: negatives: {caveat}" in out
    assert any(r.levelno == logging.WARNING and caveat in r.getMessage() for r in caplog.records)


def test_the_age_threshold_is_a_mapping_option(tmp_path, capsys):
    schema, t, _, _ = imported(tmp_path, capsys, {"new_item_hours": 3})
    age, neg = ages(t)
    assert schema.negatives["item_age"] == {
        "hours": 3.0, "positives": pytest.approx(new_share(age[~neg], 3), abs=1e-9),
        "negatives": pytest.approx(new_share(age[neg], 3), abs=1e-9)}


@pytest.mark.parametrize("negatives,expected", [
    (None, ""),
    ({"per_positive": 2, "from": "uniform", "seed": 0}, ""),  # written before the check
    ({"item_age": {"hours": 1.0, "positives": 0.196, "negatives": 0.18}}, ""),
    ({"item_age": {"hours": 1.0, "positives": 0.004, "negatives": 0.0}}, ""),  # < 1 point
    ({"item_age": {"hours": 1.0, "positives": 0.196, "negatives": 0.0004}},
     "19.6 % of positives but 0.04 % of sampled negatives are on items first logged under 1 h"),
    ({"item_age": {"hours": 2.5, "positives": 0.01, "negatives": 0.3}},
     "1.0 % of positives but 30.0 % of sampled negatives are on items first logged under "
     "2.5 h"),
])
def test_caveat_words(negatives, expected):
    caveat = item_age_caveat(negatives)
    assert (caveat == "") == (expected == "") and expected in caveat


BAD = [
    ({"lookahead_hours": -1}, "key 'negatives.lookahead_hours': expected a number >= 0, got -1"),
    ({"lookahead_hours": "1h"}, "key 'negatives.lookahead_hours': expected a number >= 0"),
    ({"window_hours": 0}, "key 'negatives.window_hours': expected a number > 0 or null, got 0"),
    ({"new_item_hours": 0}, "key 'negatives.new_item_hours': expected a number > 0, got 0"),
    ({"from": "uniform", "window_hours": 6},
     "key 'negatives.window_hours': only with from: popularity"),
]


@pytest.mark.parametrize("change,words", BAD)
def test_bad_window_keys(tmp_path, capsys, change, words):
    m = copy.deepcopy(MAPPING)
    m["negatives"].update(change)
    src = tmp_path / "src"
    src.mkdir()
    news(n=50).to_csv(src / "log.csv", index=False)
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(m))
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert words in err, err
