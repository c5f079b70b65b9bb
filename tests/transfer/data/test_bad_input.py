"""Bad input: one clear line naming file, column and row; exit code 2; no output left."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gemkd.experiments.cli import main
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import DataError


@pytest.fixture
def copy(tiny_data, tmp_path) -> Path:
    dst = tmp_path / "data"
    shutil.copytree(tiny_data, dst)
    return dst


def _rewrite(root: Path, day: int, fn) -> Path:
    """Rewrite a day's file with ``fn``'s rows, its digest recorded again as a writer that
    wrote those rows would have (so the reader's own checks are what is tested, not the
    sha256 that catches any change made after the dataset was written)."""
    path = root / f"day={day}" / "part-0.parquet"
    pq.write_table(fn(pq.read_table(path)), path)
    DatasetSchema.load(root).save(root)
    return path


def _set(table: pa.Table, name: str, array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, array)


def _cli_error(capsys, *args) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_missing_schema(copy, capsys):
    (copy / "schema.json").unlink()
    err = _cli_error(capsys, "data", "validate", str(copy))
    assert "schema.json: missing" in err


def test_renamed_column(copy, capsys):
    path = _rewrite(copy, 1, lambda t: t.rename_columns(
        ["clicked" if c == "click" else c for c in t.column_names]))
    err = _cli_error(capsys, "data", "validate", str(copy))
    assert str(path) in err and "column 'click' missing" in err


def test_wrong_type(copy, capsys):
    path = _rewrite(copy, 0, lambda t: _set(t, "bid", pc.cast(t["bid"], pa.float64())))
    err = _cli_error(capsys, "data", "validate", str(copy))
    assert str(path) in err and "'bid' has type double, expected float" in err


def test_label_outside_binary(copy):
    def bad(t):
        click = t["click"].to_numpy().copy()
        click[123] = 2
        return _set(t, "click", pa.array(click))

    path = _rewrite(copy, 2, bad)
    with pytest.raises(DataError) as e:
        list(DatasetReader(copy, days=(2, 3)))
    assert str(e.value) == f"{path}: column 'click' row 123: label 2 outside {{0, 1}}"


def test_negative_ids(copy):
    def bad(t):
        ad = t["ad_id"].to_numpy().copy()
        ad[7] = -5
        return _set(t, "ad_id", pa.array(ad))

    path = _rewrite(copy, 0, bad)
    with pytest.raises(DataError, match=rf"{path}: column 'ad_id' row 7: negative id -5"):
        list(DatasetReader(copy))


def test_negative_id_in_history_names_its_row(copy):
    def bad(t):
        hist = t["hist_item_id"].combine_chunks()
        values = hist.values.to_numpy().copy()
        row = 50
        values[hist.offsets.to_numpy()[row]] = -1  # first event of a row with history
        return _set(t, "hist_item_id", pa.ListArray.from_arrays(hist.offsets, values))

    t = pq.read_table(copy / "day=0" / "part-0.parquet")
    assert pc.list_value_length(t["hist_item_id"])[50].as_py() > 0
    _rewrite(copy, 0, bad)
    with pytest.raises(DataError, match=r"column 'hist_item_id' row 50: negative id -1"):
        list(DatasetReader(copy))


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_empty_or_corrupt_parquet(copy, capsys, damage):
    path = copy / "day=3" / "part-0.parquet"
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "truncated": data[: len(data) // 2],
                      "garbage": b"not parquet at all" * 10}[damage])
    err = _cli_error(capsys, "data", "validate", str(copy))
    assert str(path) in err


def test_synth_bad_config_leaves_nothing(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("n_days: 3\nexamples_per_dya: 10\n")
    out = tmp_path / "out"
    err = _cli_error(capsys, "data", "synth", "--config", str(cfg), "--out", str(out))
    assert "unknown key 'examples_per_dya'" in err and str(cfg) in err
    cfg.write_text("n_days: three\n")
    err = _cli_error(capsys, "data", "synth", "--config", str(cfg), "--out", str(out))
    assert "key 'n_days': expected an integer, got 'three'" in err
    cfg.write_text("n_days: 0\n")
    err = _cli_error(capsys, "data", "synth", "--config", str(cfg), "--out", str(out))
    assert "'n_days' must be >= 1" in err
    assert not out.exists() and list(tmp_path.iterdir()) == [cfg]


def test_synth_cli_writes_dataset_and_refuses_to_clobber(tmp_path, capsys):
    cfg = tmp_path / "ok.yaml"
    cfg.write_text("n_days: 2\nexamples_per_day: 300\nn_users: 100\nn_ads: 50\n"
                   "n_content: 80\nhistory_days: 5\n")
    out = tmp_path / "out"
    assert main(["data", "synth", "--config", str(cfg), "--out", str(out), "--seed", "4"]) == 0
    assert "wrote 600 examples over 2 days" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["day=0", "day=1", "schema.json"]
    err = _cli_error(capsys, "data", "synth", "--config", str(cfg), "--out", str(out))
    assert "already exists" in err
    assert main(["data", "summary", str(out)]) == 0
    table = capsys.readouterr().out
    assert "oracle_ne_click" in table and "all" in table


def test_interrupted_generation_leaves_no_output(tmp_path, monkeypatch):
    from gemkd.transfer.data.dataset_writer import DayWriter
    from tests.conftest import tiny_config

    gen = importlib.import_module("gemkd.transfer.data.synth.generate")

    calls = {"n": 0}

    class Dying(DayWriter):
        def add(self, table):
            calls["n"] += 1  # tiny: a row group a day, so the third day's
            if calls["n"] == 3:
                raise RuntimeError("disk gone")
            super().add(table)

    monkeypatch.setattr(gen, "DayWriter", Dying)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        gen.generate(tiny_config(), out)
    assert list(tmp_path.iterdir()) == []
