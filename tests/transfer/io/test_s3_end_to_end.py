"""Data and stores in a bucket (a local moto S3 server): synth → validate → teacher fit →
export → ``gemkd run`` reading both from s3://, with the integrity checks of local stores: a
store without its manifest or with a changed shard refuses to load; an export never replaces a
store unless asked; a run directory on s3:// works through a local working copy."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import StoreError
from gemkd.transfer.io import fs
from gemkd.transfer.store import TeacherStore
from tests.faults.conftest import ROOT, SPEC

WORLD = {"seed": 0, "n_days": 6, "examples_per_day": 1000, "n_users": 500, "n_ads": 300,
         "n_advertisers": 40, "n_content": 600, "n_topics": 16, "n_domains": 3,
         "new_ads_per_day": 20, "history_days": 5, "mean_history": 30.0, "max_history": 1024}


def cli(capsys, *argv: str) -> str:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    return out


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_data_and_stores_in_a_bucket(s3, tmp_path, capsys):
    world = tmp_path / "world.yaml"
    world.write_text(yaml.safe_dump(WORLD))
    data, store = f"{s3}/data", f"{s3}/stores/gem"
    cli(capsys, "data", "synth", "--config", str(world), "--out", data)
    assert DatasetSchema.load(data).days == list(range(6))
    assert "example_id unique" in cli(capsys, "data", "validate", data)

    config = tmp_path / "tiny.yaml"
    values = yaml.safe_load((ROOT / "experiments/teacher/configs/tiny.yaml").read_text())
    config.write_text(yaml.safe_dump({**values, "max_steps": 8, "max_seq_len": 16,
                                      "train_days": [0, 3], "val_days": [3, 4]}))
    fit = tmp_path / "fit"
    cli(capsys, "teacher", "fit", "--config", str(config), "--data", data, "--out", str(fit))
    ckpt = fit / "checkpoints" / "last.ckpt"
    export = ["teacher", "export", "--ckpt", str(ckpt), "--data", data, "--out", store]
    assert "exported 6000 rows" in cli(capsys, *export)
    loaded = TeacherStore(store)  # manifest, shards, row counts and sha256 checked on S3
    assert loaded.num_rows == 6000 and loaded.read(days=(5, 6)).num_rows == 1000

    # the same integrity guarantees as a local store
    capsys.readouterr()
    assert main(export) == 2
    assert f"{store}: already exists; choose a new path or pass --overwrite" in \
        capsys.readouterr().err
    shard = next(n for n in fs.list_files(store) if n.endswith(".parquet"))
    raw = fs.read_bytes(fs.join(store, shard))
    mid = len(raw) // 2  # a flipped bit in the data pages: the footer still reads
    fs.write_bytes(fs.join(store, shard), raw[:mid] + bytes([raw[mid] ^ 1]) + raw[mid + 1:])
    try:
        TeacherStore(store)
        raise AssertionError("a changed shard loaded")
    except StoreError as e:
        assert "sha256 differs from manifest.json" in str(e)
    cli(capsys, *export, "--overwrite")
    assert TeacherStore(store).num_rows == 6000

    # predictions logged elsewhere → a store in the bucket, keys taken from the S3 dataset
    logged = tmp_path / "logged.parquet"
    pq.write_table(TeacherStore(store).read().drop_columns(["day", "domain", "user_id", "ts"]),
                   logged)
    imported = f"{s3}/stores/imported"
    cli(capsys, "store", "import", "--src", str(logged), "--out", imported, "--tasks",
        "click,conversion,engage", "--trained-until-day", "2", "--data", data)
    assert TeacherStore(imported).read(days=(0, 1)).num_rows == 1000

    # gemkd run: the dataset and the imported store read in place from the bucket
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        **SPEC, "data": {"source": "dataset", "src": data}, "teacher": {"store": store},
        "variants": ["baseline", "kd", "kd_repr"],
        "repr": {"layer": "trunk", "code_dim": 4, "bits": 8, "max_events": 10, "epochs": 1}}))
    out = tmp_path / "run"
    cli(capsys, "run", str(spec), "--out", str(out), "--threads", "1")
    assert not list(out.glob("cache/data-*"))  # the dataset was not copied
    assert (out / "results.csv").read_text().count("kd_repr") > 0

    # a run directory in the bucket: built in a local working copy, synced after every step
    remote = f"{s3}/runs/tiny"
    cli(capsys, "run", str(spec), "--out", remote, "--threads", "1")
    files = fs.list_files(remote)
    assert {"results.csv", "report.md", "runs.jsonl", "log.txt", "spec.yaml"} <= set(files)
    assert any(f.startswith("cache/codes-") and f.endswith("codes.json") for f in files)
    # a rerun from another machine's empty working copy reuses every student run
    log = cli(capsys, "run", str(spec), "--out", remote, "--threads", "1")
    assert "[cached] kd_repr seed 0 (runs.jsonl)" in log


def test_a_store_without_its_manifest_is_no_store(s3, tmp_path):
    store = f"{s3}/half"
    fs.write_bytes(f"{store}/part-r000-00000.parquet", b"PAR1")
    try:
        TeacherStore(store)
        raise AssertionError("loaded")
    except StoreError as e:
        assert str(e) == f"{store}: no manifest.json — the export did not finish"
