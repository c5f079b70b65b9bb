"""One filesystem vocabulary for local paths and s3:// URIs, and the commit protocol on an
object store: data files first, the commit marker last, nothing that counts after a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from gemkd.transfer.errors import GemkdError
from gemkd.transfer.io import fs
from gemkd.transfer.io.publish import output_directory


def test_local_paths_stay_paths(tmp_path):
    where = fs.as_where(str(tmp_path))
    assert isinstance(where, Path) and fs.join(where, "a", "b.json") == tmp_path / "a" / "b.json"
    assert fs.as_where(f"file://{tmp_path}") == tmp_path
    with pytest.raises(GemkdError, match=r"gs://b/x: unsupported scheme gs://"):
        fs.as_where("gs://b/x")
    assert fs.join("s3://b/x/", "day=1", "part-0.parquet") == "s3://b/x/day=1/part-0.parquet"
    assert fs.name("s3://b/x/store") == "store" and fs.parent("s3://b/x/store") == "s3://b/x"


@pytest.mark.parametrize("remote", [False, True], ids=["local", "s3"])
def test_same_operations_both_ways(tmp_path, request, remote):
    root = request.getfixturevalue("s3") + "/t" if remote else tmp_path / "t"
    f = fs.join(root, "sub", "a.json")
    fs.write_bytes(f, b"{}") if remote else (f.parent.mkdir(parents=True), fs.write_bytes(f, b"{}"))
    assert fs.is_file(f) and fs.is_dir(fs.join(root, "sub")) and not fs.exists(fs.join(root, "x"))
    assert fs.read_bytes(f) == b"{}" and fs.size(f) == 2
    assert fs.list_files(root) == ["sub/a.json"] and fs.list_names(root) == ["sub"]
    assert fs.sha256(f) == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    fs.remove(f)
    assert fs.list_files(root) == []


def _build(tmp: Path) -> None:
    (tmp / "day=0").mkdir()
    (tmp / "day=0" / "part-0.parquet").write_bytes(b"rows")
    (tmp / "schema.json").write_text("{}")


def test_publish_uploads_the_marker_last_and_refuses_a_taken_prefix(s3, monkeypatch):
    order = []
    upload = fs.upload
    monkeypatch.setattr(fs, "upload", lambda local, where: (order.append(fs.name(where)),
                                                            upload(local, where)))
    target = f"{s3}/data"
    with output_directory(target, last=("schema.json",)) as tmp:
        _build(tmp)
        assert not fs.exists(target)  # nothing is visible while it is built
    assert order == ["part-0.parquet", "schema.json"]
    with pytest.raises(GemkdError, match=f"{target}: already exists; choose a new path or "
                                         "pass --overwrite"):
        with output_directory(target, last=("schema.json",)) as tmp:
            _build(tmp)


def test_a_crash_mid_publish_leaves_no_marker(s3, monkeypatch):
    target = f"{s3}/data"
    with output_directory(target, last=("schema.json",)) as tmp:
        _build(tmp)
    upload = fs.upload

    def dies_after_data(local, where):
        if fs.name(where) == "schema.json":
            raise ConnectionError("killed")
        upload(local, where)

    monkeypatch.setattr(fs, "upload", dies_after_data)
    with pytest.raises(ConnectionError):  # an overwrite that dies before its commit
        with output_directory(target, overwrite=True, last=("schema.json",)) as tmp:
            _build(tmp)
    # the old marker went first: what is left is neither the old output nor a new one
    assert fs.list_files(target) == ["day=0/part-0.parquet"]
