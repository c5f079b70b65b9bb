"""KuaiRand conversion: rows, labels, domains, days, and histories that never see the future."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pytest

from gemkd.experiments.cli import main
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.importer import load_mapping
from gemkd.transfer.data.schema import DatasetSchema
from tests.conftest import KUAIRAND_MAPPING, dataset_table

T0 = 1650816000000  # 2022-04-25 00:00 in Asia/Shanghai, in ms
MIN, DAY = 60_000, 86_400_000
FEEDBACK = ["is_click", "is_like", "is_follow", "is_comment", "is_forward", "is_hate",
            "long_view", "is_profile_enter"]
# user, video, time (ms), tab, is_click, long_view, is_like, is_hate — deliberately not in time
# order; u1 has two rows at the same time (a tie), u3 watches a video absent from the features.
ROWS = [
    (1, 10, T0 + 10 * MIN, 1, 1, 1, 0, 0),
    (2, 20, T0 + 15 * MIN, 1, 0, 0, 0, 0),
    (1, 20, T0 + 20 * MIN, 1, 0, 0, 0, 0),
    (1, 30, T0 + 20 * MIN, 0, 1, 0, 1, 0),
    (3, 30, T0 + 5 * MIN, 0, 0, 0, 0, 0),
    (1, 10, T0 + 30 * MIN, 1, 1, 0, 0, 1),
    (2, 50, T0 + 25 * MIN, 1, 1, 1, 0, 0),
    (1, 40, T0 + 2 * DAY + 5 * MIN, 2, 0, 0, 0, 0),
    (2, 20, T0 + 2 * DAY + MIN, 1, 1, 0, 0, 0),
    (3, 99, T0 + DAY + 7 * MIN, 1, 0, 0, 0, 0),
    (0, 10, T0 + DAY, 1, 1, 1, 0, 0),
]


def write_log(directory: Path, drop: tuple[str, ...] = (), name: str = "log_standard_x.csv"
              ) -> Path:
    """A KuaiRand-format log of ROWS (columns in ``drop`` left out)."""
    df = pd.DataFrame(ROWS, columns=["user_id", "video_id", "time_ms", "tab", "is_click",
                                     "long_view", "is_like", "is_hate"])
    local = pd.to_datetime(df["time_ms"], unit="ms", utc=True).dt.tz_convert("Asia/Shanghai")
    df["date"] = local.dt.strftime("%Y%m%d").astype(int)
    df["hourmin"] = local.dt.hour * 100
    for col in FEEDBACK:
        if col not in df:
            df[col] = 0
    df = df.drop(columns=list(drop))
    directory.mkdir(parents=True, exist_ok=True)
    df.to_csv(directory / name, index=False)
    return directory / name


def write_features(directory: Path) -> None:
    m = load_mapping(KUAIRAND_MAPPING)
    users = pd.DataFrame({"user_id": [0, 1, 2, 3]})
    for c in m.side_tables[0].categorical:
        users[c.column] = ["full_active", "UNKNOWN", "full_active", "low_active"] \
            if c.column == "user_active_degree" else [0, 1, 1, 2]
    users.to_csv(directory / "user_features_test.csv", index=False)
    pd.DataFrame({"video_id": [10, 20, 30, 40, 50], "author_id": [7, 7, 9, 5, 5],
                  "video_type": ["NORMAL", "AD", "NORMAL", "NORMAL", "NORMAL"],
                  "upload_type": "Web", "visible_status": 0.0, "music_id": 1, "music_type": 9.0,
                  "tag": ["20,43", "3", "20", None, "7"],
                  "video_duration": [1000.0, 60000.0, None, 5.0, 0.0]}
                 ).to_csv(directory / "video_features_basic_test.csv", index=False)
    # the whole-period statistics file must never be read: garbage proves it
    (directory / "video_features_statistic_test.csv").write_bytes(b"\xff\xfe not csv")


def convert(capsys, src: Path, out: Path, *args: str) -> tuple[DatasetSchema, pd.DataFrame, str]:
    assert main(["data", "kuairand", "--src", str(src), "--out", str(out), *args]) == 0
    printed = capsys.readouterr().out
    assert sum(len(b) for b in DatasetReader(out, batch_size=4)) == len(ROWS)  # validates
    return DatasetSchema.load(out), dataset_table(out).to_pandas(), printed


def expected_histories(cap: int) -> list[list[int]]:
    """Per row in time order (stable), the indices of its user's strictly earlier rows."""
    order = sorted(range(len(ROWS)), key=lambda i: ROWS[i][2])
    return [[j for j in order if ROWS[j][0] == ROWS[i][0] and ROWS[j][2] < ROWS[i][2]][-cap:]
            for i in order], order


def test_small_log(tmp_path, capsys):
    src = tmp_path / "src"
    write_log(src)
    write_features(src)
    schema, t, _ = convert(capsys, src, tmp_path / "out", "--min-domain-share", "0.15",
                           "--max-history", "2")
    hist, order = expected_histories(2)
    assert schema.source == "kuairand" and schema.tasks == ["click", "long_view", "like"]
    assert schema.domains == ["tab_1", "tab_0", "other"]  # tab 2 (1 row of 11) is rare
    assert list(t["example_id"]) == list(range(len(ROWS)))
    assert list(t["ts"]) == [ROWS[i][2] // 1000 for i in order]
    assert list(t["user_id"]) == [ROWS[i][0] for i in order]
    assert list(t["day"]) == [(ROWS[i][2] - T0) // DAY for i in order] and schema.days == [0, 1, 2]
    assert list(t["domain"]) == [{1: 0, 0: 1, 2: 2}[ROWS[i][3]] for i in order]
    assert list(t["click"]) == [ROWS[i][4] for i in order]
    assert list(t["like"]) == [ROWS[i][6] for i in order]
    feedback = {i: 4 if r[7] else 3 if r[6] else 2 if r[5] else 1 if r[4] else 0
                for i, r in enumerate(ROWS)}
    assert [list(h) for h in t["hist_item_id"]] == [[ROWS[j][1] for j in h] for h in hist]
    assert [list(h) for h in t["hist_feedback"]] == [[feedback[j] for j in h] for h in hist]
    assert [list(h) for h in t["hist_tab"]] == [[{1: 0, 0: 1, 2: 2}[ROWS[j][3]] for j in h]
                                                for h in hist]
    assert max(len(h) for h in hist) == 2  # the cap bit: u1 has 3 earlier rows at its last
    # features: unknown video 99 → 0; first tag; log2 duration buckets; missing duration → 0
    item = t["item_id"].to_numpy()
    assert (t["author_id"][item == 99] == 0).all() and (t["author_id"][item != 99] > 0).all()
    tag = dict(zip(item, t["tag"], strict=True))
    assert tag[10] == tag[30] > 0 and tag[40] == 0 and tag[99] == 0
    dur = dict(zip(item, t["duration_bucket"], strict=True))
    assert dur == {10: 9 + 1, 20: 15 + 1, 30: 0, 40: 2 + 1, 50: 0 + 1, 99: 0}
    assert np.isclose(t["log_duration"][item == 20].iloc[0], np.log1p(60000.0))
    assert "user_active_degree" in [f.name for f in schema.categorical]


def test_shrinks_without_tab_like_and_feature_files(tmp_path, capsys):
    src = tmp_path / "src"
    write_log(src, drop=("tab", "is_like", "date"))
    schema, t, printed = convert(capsys, src, tmp_path / "out")
    assert schema.domains == ["all"] and (t["domain"] == 0).all()
    assert schema.tasks == ["click", "long_view"]
    assert "note: task 'like' left out" in printed and "has no column 'is_like'" in printed
    assert "one domain 'all'" in printed and "side table user_features* not found" in printed
    assert [f.name for f in schema.categorical] == ["user_id", "item_id"] and schema.dense == []
    assert [f.name for f in schema.sequence] == ["hist_item_id", "hist_feedback", "hist_age"]


def test_single_file_src(tmp_path, capsys):
    log = write_log(tmp_path / "src")
    write_features(tmp_path / "src")
    schema, _, _ = convert(capsys, log, tmp_path / "out", "--tasks", "hate,click")
    assert schema.tasks == ["hate", "click"] and "author_id" in [f.name for f in
                                                                  schema.categorical]


def test_two_log_files_read_in_name_order(tmp_path, capsys):
    one = tmp_path / "one"
    write_log(one)
    _, single, _ = convert(capsys, one, tmp_path / "out1")
    two = tmp_path / "two"
    full = pd.read_csv(one / "log_standard_x.csv")
    two.mkdir()
    full.iloc[:5].to_csv(two / "log_random_a.csv", index=False)  # names sort: random first
    full.iloc[5:].to_csv(two / "log_standard_b.csv", index=False)
    (two / "notes.csv").write_text("not,a,log\n")  # not a log name: never read
    _, split, _ = convert(capsys, two, tmp_path / "out2")
    pd.testing.assert_frame_equal(single, split)


def cli_error(capsys, out: Path, *args: str) -> str:
    assert main(["data", "kuairand", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert not out.exists() and not list(out.parent.glob(f".{out.name}*"))
    return err


def test_task_errors(tmp_path, capsys):
    log = write_log(tmp_path / "src", drop=("is_like",))
    out = tmp_path / "out"
    err = cli_error(capsys, out, "--src", str(log.parent), "--tasks", "click,like")
    assert f"{log}: column 'is_like' missing (needed by task 'like' from --tasks)" in err
    err = cli_error(capsys, out, "--src", str(log.parent), "--tasks", "click,clicks")
    assert "--tasks: unknown task 'clicks'" in err


@pytest.mark.parametrize("damage,expect", [
    ("nonnumeric", "column 'user_id' line 3: 'x' is not a number"),
    ("negative", "column 'video_id' line 4: negative id -5"),
    ("missing", "column 'time_ms' missing"),
    ("fraction", "column 'is_click' line 2: 0.5 is not 0 or 1"),
    ("unreadable", "not a readable CSV"),
    ("empty_dir", "no log files"),
])
def test_malformed_logs(tmp_path, capsys, damage, expect):
    log = write_log(tmp_path / "src")
    lines = log.read_text().splitlines()
    head = lines[0].split(",")
    if damage in ("nonnumeric", "negative", "fraction"):
        col, line, value = {"nonnumeric": ("user_id", 3, "x"), "negative": ("video_id", 4, "-5"),
                            "fraction": ("is_click", 2, "0.5")}[damage]
        cells = lines[line - 1].split(",")
        cells[head.index(col)] = value
        lines[line - 1] = ",".join(cells)
        log.write_text("\n".join(lines) + "\n")
    elif damage == "missing":
        i = head.index("time_ms")
        log.write_text("\n".join(",".join(c for j, c in enumerate(x.split(",")) if j != i)
                                 for x in lines) + "\n")
    elif damage == "unreadable":
        log.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\x81 not a csv\n")
    else:
        log.unlink()
    err = cli_error(capsys, tmp_path / "out", "--src", str(log.parent))
    assert expect in err
    if damage != "empty_dir":
        assert str(log) in err


# ---- the shipped 14-day slice ---------------------------------------------------------------
@pytest.fixture(scope="module")
def kr(kuairand_src, tmp_path_factory):
    out = tmp_path_factory.mktemp("kr") / "data"
    assert main(["data", "kuairand", "--src", str(kuairand_src), "--out", str(out)]) == 0
    source = pd.read_parquet(next(kuairand_src.glob("log_standard*.parquet")))
    return out, dataset_table(out), source.iloc[np.argsort(source["time_ms"], kind="stable")]


def test_slice_rows_labels_domains_days(kr):
    out, t, src = kr
    schema = DatasetSchema.load(out)
    assert t.num_rows == len(src) == 228_329
    assert np.array_equal(t["example_id"].to_numpy(), np.arange(len(src)))
    assert np.array_equal(t["ts"].to_numpy(), src["time_ms"].to_numpy() // 1000)
    assert np.array_equal(t["item_id"].to_numpy(), src["video_id"].to_numpy())
    for task, col in [("click", "is_click"), ("long_view", "long_view"), ("like", "is_like")]:
        assert t[task].to_numpy().mean() == pytest.approx(src[col].mean(), abs=1e-12)
    assert schema.domains == ["tab_1", "tab_0", "tab_4", "tab_6", "tab_2", "other"]
    names = np.array(schema.domains)[t["domain"].to_numpy()]
    tab = src["tab"].to_numpy()
    assert np.array_equal(names, np.where(np.isin(tab, [1, 0, 4, 6, 2]),
                                          "tab_" + tab.astype(str), "other"))
    # days: 14, as the log's date column; they differ only where `date` is the next day, late
    # in the evening (date/hourmin round up to the hour)
    date = pd.to_datetime(src["date"].astype(str)).to_numpy().astype("datetime64[D]")
    by_date = (date - date.min()).astype(int)
    day = t["day"].to_numpy()
    assert schema.days == list(range(14)) and np.all(np.diff(day) >= 0)
    differ = day != by_date
    local = pd.to_datetime(src["time_ms"], unit="ms", utc=True).dt.tz_convert("Asia/Shanghai")
    assert differ.mean() < 0.01 and np.all(by_date[differ] == day[differ] + 1)
    assert np.all(local.dt.hour.to_numpy()[differ] >= 21)


def test_slice_histories_are_strictly_earlier(kr):
    _, t, src = kr
    lengths = pc.list_value_length(t["hist_item_id"]).to_numpy()
    user, tm = src["user_id"].to_numpy(), src["time_ms"].to_numpy()
    by_user = np.lexsort((tm, user))  # rows in (user, time) order
    key = user[by_user] * 10**13 + tm[by_user]
    end = np.searchsorted(key, user * 10**13 + tm, "left")  # first same-user row at this time
    earlier = end - np.searchsorted(user[by_user], user, "left")
    assert np.array_equal(lengths, np.minimum(earlier, 1024)) and lengths.sum() > 1_000_000
    ev = by_user[np.repeat(end - lengths, lengths) + np.arange(lengths.sum())
                 - np.repeat(np.cumsum(lengths) - lengths, lengths)]
    assert np.array_equal(src["video_id"].to_numpy()[ev],
                          pc.list_flatten(t["hist_item_id"]).to_numpy())
    assert np.all(tm[ev] < np.repeat(tm, lengths))  # no event at or after its row's time
    assert np.array_equal(np.repeat(user, lengths), user[ev])


def test_slice_features_join_by_id(kr, kuairand_src):
    _, t, _ = kr
    videos = pd.read_parquet(next(kuairand_src.glob("video_features_basic*.parquet")))
    authors = np.sort(videos["author_id"].unique())
    got = authors[t["author_id"].to_numpy() - 1]
    want = videos.set_index("video_id")["author_id"].reindex(t["item_id"].to_numpy())
    assert np.array_equal(got, want.to_numpy())
