"""A student artifact of an imported log carries the id vocabularies of the columns it reads:
rows given by their raw ids (text user ids, numeric item ids, a side table's topic, a domain
value, the raw items of each history) and turned into codes by ``gemkd.encode_raw`` score as
the same rows read by code from the dataset; an unseen id takes the import's unknown code."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

import gemkd
from gemkd.experiments.artifacts import StudentArtifact, export_student
from gemkd.experiments.cli import main
from gemkd.experiments.run import packs
from gemkd.experiments.run.jobs import StudentRun
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.spec.load import spec_from_mapping
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.importer import import_logs, parse_mapping
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import ConfigError
from tests.experiments.artifacts.test_student_export import same

pytestmark = pytest.mark.usefixtures("one_torch_thread")

T0 = 1_717_200_000  # 2024-06-01 00:00:00 UTC
MAX_EVENTS = 5
MAPPING = {
    "source": "shop",
    "time": {"column": "t", "unit": "s"},
    "days": {"calendar": "UTC"},
    "user": "user",
    "item": "item",
    "domain": {"column": "surface", "min_share": 0.1},
    "labels": {"click": "clicked"},
    "categorical": ["device"],
    "history": {"max_events": MAX_EVENTS, "fields": {"item_id": "item", "topic": {"feature":
                                                                                "topic"},
                                                     "age": "age"}},
    "side_tables": [{"path": "items.csv", "key": "item", "on": "item",
                     "categorical": ["topic"]}],
}


def _log(rng: np.random.Generator, n: int = 720) -> pd.DataFrame:
    """Six days of events, unique times; items 126-129 have no side row."""
    t = T0 + np.sort(rng.choice(6 * 86_400, size=n, replace=False))
    item = rng.integers(100, 130, size=n)
    return pd.DataFrame({
        "t": t, "user": [f"u{k:02d}" for k in rng.integers(0, 15, size=n)], "item": item,
        "surface": rng.choice(["feed", "search", "mail"], size=n, p=[0.7, 0.25, 0.05]),
        "device": rng.choice(["web", "ios", "android"], size=n),
        "clicked": (rng.random(n) < np.where(item % 3 == 0, 0.5, 0.15)).astype(int)})


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("raw_ids")
    src = root / "src"
    src.mkdir()
    rng = np.random.default_rng(0)
    log = _log(rng)
    log.to_csv(src / "log.csv", index=False)
    items = pd.DataFrame({"item": np.arange(100, 126),
                          "topic": [["sport", "news", "music", "film"][k % 4]
                                    for k in range(26)]})
    items.to_csv(src / "items.csv", index=False)
    import_logs(src, parse_mapping(MAPPING, "mapping.yaml"), root / "data")
    return root / "data", log.merge(items, how="left", on="item")


@pytest.fixture(scope="module")
def artifact(imported, tmp_path_factory):
    data, _ = imported
    root = tmp_path_factory.mktemp("raw_ids_run")
    run = RunDir(root / "run")
    spec = spec_from_mapping({
        "name": "raw", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
        "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6],
        "student": {"class_path": "seq_pool", "init_args": {
            "hidden": [16], "query_feature": "item_id",
            "sequence": ["hist_item_id", "hist_topic"]}},
        "student_tasks": ["click"], "variants": ["baseline"], "batch_size": 64,
        "ema_decay": 0.9, "keep_students": "all"})
    packs.execute_pack([StudentRun(
        key="final|baseline|0|0", phase="final", spec=spec, variant="baseline",
        params={"lr": 0.02, "ema_decay": 0.9}, seed=0, lag=0, world=0, train_days=(3, 5),
        eval_days=(5, 6), trained_until_day=2, data=str(data), stores={},
        base_rates={"click": 0.25}, student=str(run.student_path(0, 0, "baseline", 0)))])
    return StudentArtifact(export_student(run.path, "baseline", root / "art"))


def test_the_export_names_the_vocabularies(artifact, tmp_path, capsys):
    assert main(["student", "export", artifact.meta["run"], "--variant", "baseline", "--out",
                 str(tmp_path / "art")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("id vocabularies: device, domain, hist_item_id, hist_topic, item_id, "
                    "topic, user_id (raw ids -> codes: gemkd.encode_raw)")


def _histories(log: pd.DataFrame, rows: np.ndarray) -> list[pd.DataFrame]:
    """Each row's user's events strictly before it, the latest MAX_EVENTS, oldest first (the
    import's histories, rebuilt from the raw log)."""
    out = []
    for i in rows:
        mine = log[(log["user"] == log["user"].iloc[i]) & (log["t"] < log["t"].iloc[i])]
        out.append(mine.tail(MAX_EVENTS))
    return out


def test_raw_ids_through_the_vocabularies_score_as_the_codes(imported, artifact):
    data, log = imported
    art = artifact
    contract = art.meta["inputs"]
    assert set(contract["vocabularies"]) == {"user_id", "item_id", "device", "topic",
                                             "domain", "hist_item_id", "hist_topic"}
    assert {f"vocab/{c}.parquet" for c in ("user_id", "item_id", "device", "topic",
                                           "domain")} <= set(art.meta["files"])
    columns = [f.name for f in art.schema.categorical]
    raw_of = {"user_id": "user", "item_id": "item", "device": "device", "topic": "topic"}
    n, moved = 0, 0
    for batch in DatasetReader(data, days=(5, 6), batch_size=53, tasks=art.tasks,
                               oracle=False, sequence=art.sequence,
                               max_seq_len=art.max_seq_len):
        rows = batch.example_id.numpy()  # the log in time order: example id = row
        raw = log.iloc[rows]
        categorical = torch.from_numpy(np.stack(
            [gemkd.encode_raw(art, c, raw[raw_of[c]]) for c in columns], axis=1))
        domain = torch.from_numpy(gemkd.encode_raw(art, "domain", raw["surface"]))
        hist = _histories(log, rows)
        lengths = np.array([len(h) for h in hist])
        offsets = torch.from_numpy(np.r_[0, np.cumsum(lengths)])
        events = pd.concat(hist)
        seq = dict(batch.seq_values)
        seq["hist_item_id"] = torch.from_numpy(gemkd.encode_raw(art, "hist_item_id",
                                                                events["item"]))
        seq["hist_topic"] = torch.from_numpy(gemkd.encode_raw(art, "hist_topic",
                                                              events["topic"]))
        assert torch.equal(offsets, batch.seq_offsets)
        for name in ("hist_item_id", "hist_topic"):
            assert torch.equal(seq[name], batch.seq_values[name]), name
        assert torch.equal(categorical, batch.categorical)
        assert torch.equal(domain, batch.domain.long())
        by_raw = dataclasses.replace(batch, categorical=categorical, domain=domain,
                                     seq_offsets=offsets, seq_values=seq,
                                     seq_max_len=int(lengths.max(initial=0)))
        same(art.predict(by_raw), art.predict(batch))
        n += len(rows)
        moved += int((categorical[:, columns.index("topic")] == 0).sum())
    assert n == DatasetSchema.load(data).rows_per_day["5"] and moved > 0  # items w/o topic


def test_unseen_ids_take_the_imports_unknown_codes(imported, artifact):
    data, log = imported
    schema = DatasetSchema.load(data)
    assert list(gemkd.encode_raw(artifact.path, "user_id", ["u03", "nobody"])) == [4, 0]
    assert list(gemkd.encode_raw(artifact, "item_id", [100, 555])) == [1, 0]
    other = schema.domains.index("other")
    assert schema.domains[:2] == ["feed", "search"]
    assert list(gemkd.encode_raw(artifact, "domain", ["search", "mail", "push"])) == [
        1, other, other]
    with pytest.raises(ConfigError, match="no id vocabulary for column 'hist_age'"):
        gemkd.encode_raw(artifact, "hist_age", [1])
