"""``negatives:`` in an import mapping: sampled negatives for positive-only logs, drawn without
looking into the future and kept out of every history."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.data.importer import negatives
from gemkd.transfer.data.importer.mapping import Negatives
from gemkd.transfer.data.schema import DatasetSchema
from tests.conftest import ROOT, dataset_table

T0 = 1_700_000_000
MAPPING = {
    "source": "plays",
    "time": {"column": "t", "unit": "s"},
    "days": {"buckets": 3},
    "user": "user",
    "item": "item",
    "domain": "surface",
    "labels": {"play": "play"},
    "categorical": ["device"],
    "history": {"max_events": 5, "fields": {"item_id": "item", "age": "age"}},
    "side_tables": [{"path": "items.csv", "key": "item", "categorical": ["genre"]}],
    "negatives": {"per_positive": 3, "from": "popularity", "seed": 1},
}


def plays(n: int = 3000, n_users: int = 60, seed: int = 0) -> pd.DataFrame:
    """A positive-only log, not in time order: Zipf-popular items that enter the catalogue over
    time (item k first appears around row 10 k), minute times (so rows tie), two surfaces."""
    rng = np.random.default_rng(seed)
    t = T0 + 60 * np.sort(rng.integers(0, 14_400, n))
    reach = 10 + np.arange(n) // 10
    item = (rng.zipf(1.4, n) - 1) % reach
    log = pd.DataFrame({"t": t, "user": rng.integers(0, n_users, n), "item": item,
                        "surface": rng.choice(["home", "search"], n),
                        "device": rng.choice(["ios", "android", "web"], n), "play": 1})
    return log.sample(frac=1, random_state=seed)


def setup(tmp_path: Path, mapping: dict = MAPPING, log: pd.DataFrame | None = None
          ) -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir(parents=True, exist_ok=True)
    (plays() if log is None else log).to_csv(src / "log.csv", index=False)
    items = np.arange(400)
    pd.DataFrame({"item": items, "genre": items % 7}).to_csv(src / "items.csv", index=False)
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return src, path


def imported(capsys, tmp_path: Path, mapping: dict = MAPPING, log: pd.DataFrame | None = None,
             name: str = "out") -> tuple[DatasetSchema, pd.DataFrame, str]:
    src, path = setup(tmp_path, mapping, log)
    out = tmp_path / name
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(out)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert main(["data", "validate", str(out)]) == 0
    assert "ok: " in capsys.readouterr().out
    return DatasetSchema.load(out), dataset_table(out).to_pandas(), printed


def with_negatives(**changes) -> dict:
    m = copy.deepcopy(MAPPING)
    m["negatives"].update(changes)
    return m


def pools(logged: pd.DataFrame, ahead: int = 0) -> np.ndarray:
    """How many items each logged row may draw: first logged by its time + ``ahead`` seconds,
    not its user's by then (a plain sweep over time with sets, the sampler's rule in its
    simplest form)."""
    first = logged.groupby("item_id")["ts"].min().sort_values()
    mine: dict = {}
    out = []
    for ts, group in logged.groupby("ts", sort=True):
        for u, x in zip(group["user_id"], group["item_id"], strict=True):
            mine.setdefault(u, set()).add(x)
        available = set(first.index[first.to_numpy() <= ts + ahead])
        out += [len(available - mine[u]) for u in group["user_id"]]
    return np.array(out)


def positive_of(t: pd.DataFrame) -> np.ndarray:
    """Each row's positive: itself for a logged row, the logged row before it for a negative."""
    logged = t["sampled"].to_numpy() == 0
    return np.maximum.accumulate(np.where(logged, np.arange(len(t)), 0))


@pytest.mark.parametrize("source,ahead", [("popularity", 0), ("uniform", 0),
                                          ("popularity", 1), ("uniform", 1)])
def test_negatives_are_unengaged_items_available_by_then(tmp_path, capsys, source, ahead):
    """Negatives are items first logged by the row's time + the look-ahead (0 h: seen by then;
    the default 1 h), never ones the user had engaged with by then."""
    schema, t, printed = imported(capsys, tmp_path, with_negatives(
        **{"from": source, "lookahead_hours": ahead}))
    logged, neg = t[t["sampled"] == 0], t[t["sampled"] == 1]
    assert len(logged) == 3000 and (logged["play"] == 1).all() and (neg["play"] == 0).all()
    # nothing the user engaged with at or before the row's time (same-time rows included)
    first = logged.groupby(["user_id", "item_id"])["ts"].min()
    engaged_at = first.reindex(pd.MultiIndex.from_frame(neg[["user_id", "item_id"]])).to_numpy()
    assert not (engaged_at <= neg["ts"].to_numpy()).any()
    # no item first logged later than the look-ahead after the row's time, some within it
    seen_at = logged.groupby("item_id")["ts"].min().reindex(neg["item_id"]).to_numpy()
    assert (seen_at <= neg["ts"].to_numpy() + 3600 * ahead).all()
    assert (seen_at > neg["ts"].to_numpy()).any() == (ahead > 0)
    # exactly 3 right after each positive, none where every item available was the user's own
    per_positive = np.bincount(positive_of(t))[logged.index] - 1
    empty = pools(logged, 3600 * ahead) == 0
    assert (per_positive[~empty] == 3).all() and (per_positive[empty] == 0).all()
    if ahead == 0:
        assert 0 < empty.sum() < 20 and empty[0]
        assert f"note: negatives: {empty.sum()} of 3000 logged rows got none" in printed
    else:
        assert empty.sum() < 5 and "got none" not in printed
    # the positive's time, user, domain and log features; the sampled item's side features
    pos = t.iloc[positive_of(t)[neg.index]]
    for col in ("ts", "day", "user_id", "domain", "device"):
        assert (neg[col].to_numpy() == pos[col].to_numpy()).all(), col
    raw_item = np.sort(plays()["item"].unique())[neg["item_id"].to_numpy() - 1]  # dense codes
    assert (neg["genre"].to_numpy() == raw_item % 7 + 1).all()
    assert (t["example_id"] == np.arange(len(t))).all() and t["ts"].is_monotonic_increasing
    # marked in the data and in schema.json
    assert str(schema.arrow_schema().field("sampled").type) == "int8"
    assert t["sampled"].dtype == np.int8 and schema.column_types["sampled"] == "int8"
    expected = {"per_positive": 3, "from": source, "seed": 1, "lookahead_hours": float(ahead),
                "new_item_hours": 1.0, **({"window_hours": 24.0} if source == "popularity"
                                          else {})}
    assert schema.generator["mapping"]["negatives"] == expected
    assert schema.negatives == {**expected, "item_age": schema.negatives["item_age"]}
    assert set(schema.negatives["item_age"]) == {"hours", "positives", "negatives"}


def test_histories_hold_logged_rows_only(tmp_path, capsys):
    _, t, _ = imported(capsys, tmp_path)
    logged = {u: g for u, g in t[t["sampled"] == 0].groupby("user_id")}
    hist = t["hist_item_id"].map(list).tolist()
    for i, (user, ts) in enumerate(zip(t["user_id"], t["ts"], strict=True)):
        mine = logged[user]  # the user's logged rows, strictly before ts, the 5 latest
        k = int(np.searchsorted(mine["ts"].to_numpy(), ts, side="left"))
        assert hist[i] == list(mine["item_id"].to_numpy()[max(k - 5, 0):k]), i
    host = positive_of(t)
    assert [hist[h] for h in host] == hist and [len(h) for h in hist].count(5) > 1000


def test_same_seed_same_rows_other_seed_other_draws(tmp_path, capsys):
    _, a, _ = imported(capsys, tmp_path / "a")
    _, b, _ = imported(capsys, tmp_path / "b")
    pd.testing.assert_frame_equal(a, b)
    _, c, _ = imported(capsys, tmp_path / "c", with_negatives(seed=2))
    assert len(c) == len(a) and (c["sampled"] == a["sampled"]).all()
    assert (c["item_id"] != a["item_id"]).mean() > 0.3


def test_popularity_favours_popular_items():
    """Earlier rows played item 0 80 times and items 1..9 twice each; then 500 new users play a
    new item, 10 or 11 by turns, all at one time. A user's negative is item 0 with probability
    80/99 = 0.81 under popularity (the other new item has no row *before* that time: it weighs
    one row, as a new item), 1/11 under uniform (both new items are in the catalogue by then):
    fixed seed, margins of 3+ std."""
    early = np.r_[np.zeros(80, dtype=np.int64), np.repeat(np.arange(1, 10), 2)]
    item = np.r_[early, 10 + np.arange(500) % 2]
    user = np.r_[np.arange(len(early)), 1000 + np.arange(500)]
    t = np.r_[np.arange(len(early)), np.full(500, 10**4)].astype(np.int64)
    log = negatives.Log.build(user, item, t)
    drawn = {source: negatives.sample(log, Negatives(1, source, seed=3, lookahead_hours=0))
             [len(early):, 0] for source in ("popularity", "uniform")}
    assert 0.75 < (drawn["popularity"] == 0).mean() < 0.88
    other = 11 - np.arange(500) % 2
    assert 0 < (drawn["popularity"] == other).sum() < 15  # one row's weight, not its 250 rows
    assert not (drawn["popularity"] == item[len(early):]).any()
    assert 0.04 < (drawn["uniform"] == 0).mean() < 0.15
    assert 20 < (drawn["uniform"] == 11 - np.arange(500) % 2).sum() < 75  # the other new item
    assert not (drawn["uniform"] == item[len(early):]).any()  # never the user's own


def test_popularity_end_to_end(tmp_path, capsys):
    """On the Zipf log, negatives fall on the ten most played items far more often under
    popularity (counted since the log's start) than under uniform."""
    shares = {}
    for source, window in (("popularity", {"window_hours": None}), ("uniform", {})):
        _, t, _ = imported(capsys, tmp_path / source,
                           with_negatives(**{"from": source}, **window))
        logged, neg = t[t["sampled"] == 0], t[t["sampled"] == 1]
        top = logged["item_id"].value_counts().index[:10]
        shares[source] = neg["item_id"].isin(top).mean()
    assert shares["popularity"] > 2 * shares["uniform"] + 0.1, shares


def test_logged_rows_without_a_label_still_count_as_engagements(tmp_path, capsys):
    log = plays()
    log.loc[log.index[:40], "play"] = 0
    _, t, printed = imported(capsys, tmp_path, log=log)
    assert "note: negatives: 40 of 3000 logged rows have every label 0" in printed
    unlabelled = t[(t["sampled"] == 0) & (t["play"] == 0)]
    assert len(unlabelled) == 40 and (t["sampled"] == 1).sum() > 3 * 2900


def test_sampler_edge_cases():
    """Tiny pools repeat, larger ones give distinct items; rows at the same time count as
    engaged; with no earlier row, popularity falls back to uniform over the catalogue."""
    t = np.array([1, 2, 3, 3, 4, 4, 4, 4, 4], dtype=np.int64)
    user = np.array([0, 1, 0, 0, 2, 2, 2, 2, 3])
    item = np.array(["a", "b", "c", "d", "e", "f", "g", "h", "i"])
    log = negatives.Log.build(user, item, t)
    for source in ("popularity", "uniform"):
        drawn = negatives.sample(log, Negatives(3, source, seed=0, lookahead_hours=0))
        assert list(drawn[0]) == [-1, -1, -1]  # catalogue {a}, engaged by its user
        assert list(drawn[1]) == [0, 0, 0]  # user 1 may get only a: it repeats
        assert list(drawn[2]) == [1, 1, 1] == list(drawn[3])  # c and d at the same time: b
        assert all(len(set(r)) == 3 for r in drawn[4:])  # 5 allowed items: distinct
        assert not np.isin(drawn[4:8], [4, 5, 6, 7]).any()  # user 2's own items at t = 4
    first = negatives.Log.build(np.arange(4), np.arange(4), np.zeros(4, dtype=np.int64))
    counts = np.bincount(negatives.sample(first, Negatives(2, "popularity", 0)).ravel())
    assert (counts > 0).all()  # no earlier row: any of the 4 items, none weighted by count
    # a look-ahead of 2 ns (times here are ns): row 0 (t = 1) may draw b and c (first at 2, 3),
    # not e..i (first at 4); its own a never
    ahead = negatives.sample(log, Negatives(2, "uniform", 0, lookahead_hours=2 / 3.6e12))
    assert sorted(ahead[0]) == [1, 2]
    assert (negatives.sample(log, Negatives(2, "uniform", 0, lookahead_hours=0))[0] == -1).all()


@pytest.mark.parametrize("rounds", [negatives.ROUNDS, 0])  # 0: every row by the exact finish
def test_popularity_counts_only_its_window(monkeypatch, rounds):
    """Item 0 has 50 rows a day before, item 1 has 5 rows in the last hour: with a 2 h window
    a later row draws item 1 (item 0 is out of the window), with none it draws mostly item 0."""
    monkeypatch.setattr(negatives, "ROUNDS", rounds)
    hour = 3600 * 10**9
    t = np.r_[np.zeros(50), np.full(5, 24 * hour), np.full(200, 25 * hour)].astype(np.int64)
    item = np.r_[np.zeros(50), np.ones(5), np.full(200, 2)].astype(np.int64)
    log = negatives.Log.build(np.arange(len(t)), item, t)
    windowed = negatives.sample(log, Negatives(1, "popularity", 0, 2.0, 0.0))[55:, 0]
    since_start = negatives.sample(log, Negatives(1, "popularity", 0, None, 0.0))[55:, 0]
    assert (windowed == 1).all()
    assert (since_start == 0).mean() > 0.8


BAD = [  # (change to the negatives key, words the one-line error must contain)
    ({"count": 3}, ["key 'negatives.count': unknown key; valid keys here: per_positive, from, "
                    "seed"]),
    ({"per_positive": 0}, ["key 'negatives.per_positive'", "expected an integer >= 1, got 0"]),
    ({"per_positive": 1.5}, ["key 'negatives.per_positive'", "got 1.5"]),
    ({"per_positive": True}, ["key 'negatives.per_positive'", "got True"]),
    ({"from": "random"}, ["key 'negatives.from'", "'random' is not one of popularity, uniform"]),
    ({"seed": "x"}, ["key 'negatives.seed'", "expected an integer >= 0, got 'x'"]),
    ({"seed": -1}, ["key 'negatives.seed'", "got -1"]),
]


@pytest.mark.parametrize("change,words", BAD)
def test_bad_negatives_key(tmp_path, capsys, change, words):
    bad_mapping(tmp_path, capsys, with_negatives(**change), words)


@pytest.mark.parametrize("drop,words", [
    ("per_positive", ["key 'negatives.per_positive': missing (required)"]),
    ("from", ["key 'negatives.from': missing (required)"]),
])
def test_missing_negatives_key(tmp_path, capsys, drop, words):
    m = copy.deepcopy(MAPPING)
    del m["negatives"][drop]
    bad_mapping(tmp_path, capsys, m, words)


@pytest.mark.parametrize("role", ["user", "item"])
def test_negatives_need_user_and_item(tmp_path, capsys, role):
    m = {k: v for k, v in MAPPING.items() if k not in (role, "history", "side_tables")}
    bad_mapping(tmp_path, capsys, m, [f"key 'negatives': needs '{role}'"])


def test_sampled_is_a_reserved_name(tmp_path, capsys):
    m = copy.deepcopy(MAPPING)
    m["categorical"] = [{"column": "device", "name": "sampled"}]
    bad_mapping(tmp_path, capsys, m, ["key 'categorical[0]'", "output name 'sampled' is "
                                      "already used by key 'negatives'"])
    m.pop("negatives")
    imported(capsys, tmp_path / "ok", m)  # a feature may be called sampled without negatives


def bad_mapping(tmp_path: Path, capsys, mapping: dict, words: list[str]) -> None:
    src, path = setup(tmp_path, mapping)
    out = tmp_path / "out"
    assert main(["data", "import", "--src", str(src), "--mapping", str(path), "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    for w in words:
        assert w in err, err
    assert not out.exists()


def test_logged_only_schema_has_no_negatives_key(tmp_path, capsys):
    """A log imported without negatives writes schema.json as before (no key, no column), and
    such a file loads."""
    m = {k: v for k, v in MAPPING.items() if k != "negatives"}
    schema, t, _ = imported(capsys, tmp_path, m)
    raw = json.loads((tmp_path / "out" / "schema.json").read_text())
    assert "negatives" not in raw and "sampled" not in raw["column_types"]
    assert schema.negatives is None and "sampled" not in t and len(t) == 3000


def test_docs_example(tmp_path, capsys):
    """docs/guides/your_data.md's positive-only example runs as written."""
    example = ROOT / "docs" / "examples" / "my_plays"
    out = tmp_path / "plays"
    assert main(["data", "import", "--src", str(example), "--mapping",
                 str(example / "mapping.yaml"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    caveat = ("36.7 % of positives but 5.2 % of sampled negatives are on items first logged "
              "under 1 h before their row")  # 11 of the 30 plays are a track's first
    assert printed.startswith(
        "note: negatives: 1 of 30 logged rows got none (every item available by then was one "
        "their user had engaged with)\n"
        f"note: negatives: {caveat}, so a model can tell them apart by the item's novelty "
        "alone")
    assert printed.endswith(
        f"wrote 88 examples over 3 days, tasks ['play', 'long_play'], domains ['all'], to {out}\n")
    schema, t = DatasetSchema.load(out), dataset_table(out).to_pandas()
    assert schema.generator["mapping"]["negatives"] == {
        "per_positive": 2, "from": "popularity", "seed": 7, "window_hours": 24.0,
        "lookahead_hours": 1.0, "new_item_hours": 1.0}
    assert list(t["sampled"][:9]) == [0, 0, 1, 1, 0, 1, 1, 0, 1]
    # tracks 103, 109, 106 as dense codes (the log's tracks 100..109 → 1..10)
    assert list(t["item_id"][:9]) == [4, 10, 4, 4, 7, 4, 10, 7, 10]
    assert [(f.name, f.cardinality) for f in schema.categorical[:2]] == [("user_id", 6),
                                                                         ("item_id", 11)]
    assert main(["data", "validate", str(out)]) == 0
    assert "ok: 88 rows" in capsys.readouterr().out
