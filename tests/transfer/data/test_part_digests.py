"""Every dataset writer records the sha256 of each part file it wrote in ``schema.json``, and
the check names the part that is missing, unlisted or changed."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from gemkd.experiments.cli import main
from gemkd.transfer.data.importer import import_logs, load_mapping
from gemkd.transfer.data.part_digests import verify_parts
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.errors import DataError
from tests.transfer.data.importer import test_import


def _written(tmp_path: Path, writer: str, tiny_data: Path, movielens_src: Path) -> Path:
    if writer == "synth":
        return tiny_data
    if writer == "movielens":
        out = tmp_path / "ml"
        assert main(["data", "movielens", "--src", str(movielens_src), "--out", str(out),
                     "--n-days", "4", "--max-history", "20"]) == 0
        return out
    src, mapping = test_import.setup(tmp_path)
    out = tmp_path / writer
    import_logs(src, load_mapping(mapping), out, streaming=writer == "import-streamed")
    return out


@pytest.mark.parametrize("writer", ["synth", "import-streamed", "import-in-memory",
                                    "movielens"])
def test_every_writer_records_each_part(tmp_path, tiny_data, movielens_src, writer):
    root = _written(tmp_path, writer, tiny_data, movielens_src)
    schema = DatasetSchema.load(root)
    on_disk = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in root.glob("day=*/part-*.parquet")}
    assert on_disk and schema.part_sha256 == on_disk
    assert verify_parts(root, schema.part_sha256, schema.days) == sum(
        p.stat().st_size for p in root.glob("day=*/part-*.parquet"))


def test_a_missing_unlisted_or_changed_part_is_named(tmp_path, tiny_data):
    root = tmp_path / "data"
    shutil.copytree(tiny_data, root)
    schema = DatasetSchema.load(root)
    part0, day1 = root / "day=1" / "part-0.parquet", root / "day=1"
    shutil.copy(part0, day1 / "part-1.parquet")
    with pytest.raises(DataError, match=rf"^{day1 / 'part-1.parquet'}: part file not listed"):
        verify_parts(root, schema.part_sha256, schema.days)
    (day1 / "part-1.parquet").rename(tmp_path / "aside.parquet")
    part0.unlink()
    with pytest.raises(DataError, match=rf"^{part0}: missing \(listed in schema.json\)"):
        verify_parts(root, schema.part_sha256, schema.days)
    assert verify_parts(root, schema.part_sha256, [0, 2]) > 0  # the days asked for only
    (tmp_path / "aside.parquet").rename(part0)  # the same bytes, back in place
    assert verify_parts(root, schema.part_sha256, schema.days) > 0
    raw = bytearray(part0.read_bytes())
    raw[-10] ^= 1  # in the footer: no page CRC covers it
    part0.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=rf"^{part0}: sha256 [0-9a-f]{{12}}\.\.\. differs"):
        verify_parts(root, schema.part_sha256, schema.days)
    assert verify_parts(root, {}, schema.days) == 0  # an older dataset: nothing to check
