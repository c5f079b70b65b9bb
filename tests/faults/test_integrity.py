"""Nothing silently wrong: a changed byte in a dataset's part file, a repeated ``example_id``, a
torn row of ``results.csv`` or a torn ledger line is an error naming the file (and row), or, for
the ledger a kill tears, a run trained again to the same numbers, never a different result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from tests.faults.conftest import (
    SPEC,
    TinyRun,
    cli_error,
    gemkd_run,
    repeat_example_id,
    results,
    snapshot,
)


@pytest.fixture
def run_copy(tiny_run: TinyRun, tmp_path: Path) -> TinyRun:
    """A copy of the reference run (its cached dataset included) to damage."""
    shutil.copytree(tiny_run.out, tmp_path / "out")
    return TinyRun(tiny_run.spec, tmp_path / "out")


def flip_bit(path: Path, at: float = 0.5) -> None:
    """Flip one bit of the byte ``at`` of the way into ``path`` (a data page of a part file)."""
    raw = bytearray(path.read_bytes())
    raw[int(len(raw) * at)] ^= 0x04
    path.write_bytes(bytes(raw))


def test_flipped_bit_in_a_part_fails_validate_and_run(run_copy, capsys):
    part = run_copy.data / "day=4" / "part-0.parquet"
    flip_bit(part)
    err = cli_error(capsys, "data", "validate", str(run_copy.data))
    assert err.startswith(f"error: {part}: sha256 ") and "differs from the" in err, err
    before = snapshot(run_copy.out)
    err = cli_error(capsys, "run", str(run_copy.spec), "--out", str(run_copy.out),
                    "--threads", "1")
    assert err.startswith(f"error: {part}: sha256 "), err
    assert snapshot(run_copy.out) == before  # nothing rewritten, no step redone


def test_flipped_bit_in_a_dataset_without_digests_fails_validate(run_copy, capsys):
    """A dataset of a gemkd that recorded no digests: validate says so, and a changed data
    page still fails its CRC32 when read."""
    schema = run_copy.data / "schema.json"
    raw = json.loads(schema.read_text())
    del raw["part_sha256"]
    schema.write_text(json.dumps(raw))
    capsys.readouterr()
    assert main(["data", "validate", str(run_copy.data)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"note: {run_copy.data}/schema.json lists no part digests"), out
    part = run_copy.data / "day=4" / "part-0.parquet"
    flip_bit(part)
    err = cli_error(capsys, "data", "validate", str(run_copy.data))
    assert err.startswith(f"error: {part}: row group 0 unreadable (could not verify page "
                          "integrity, CRC checksum verification failed"), err


def test_repeated_example_id_fails_run(run_copy, capsys):
    """A dataset whose writer repeated an id (its digests recorded over it): the run refuses
    it before reading, naming both places."""
    data = run_copy.data
    repeated, path = repeat_example_id(data)
    before = snapshot(run_copy.out)
    err = cli_error(capsys, "run", str(run_copy.spec), "--out", str(run_copy.out),
                    "--threads", "1")
    assert err == (f"error: {path}: column 'example_id' row 10: example_id {repeated} is "
                   f"repeated (first at {data / 'day=3' / 'part-0.parquet'} row 7); ids must be "
                   "unique"), err
    assert snapshot(run_copy.out) == before


@pytest.mark.parametrize("cut", ["after-ne", "middle-row"])
def test_torn_results_row_fails_report(run_copy, capsys, cut):
    path = run_copy.out / "results.csv"
    lines = path.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    ne = header.index("ne")
    if cut == "after-ne":  # the last line cut after its NE column, as a cut copy leaves it
        lines[-1] = ",".join(lines[-1].split(",")[:ne + 1])
        line = len(lines)
    else:  # a middle row missing its last fields
        lines[1] = ",".join(lines[1].split(",")[:ne + 1]) + "\n"
        line = 2
    path.write_text("".join(lines))
    before = snapshot(run_copy.out)
    err = cli_error(capsys, "report", str(run_copy.out))
    assert err.startswith(f"error: {path} line {line}: torn row"), err
    assert snapshot(run_copy.out) == before  # the run's report.md as it was


def test_resume_after_a_torn_ledger_line_reproduces_the_run(tmp_path, capsys):
    """A kill tears the ledger's last line (a member of a pack of three seeds): the rerun
    leaves that line out, trains that run again (alone, in a pack of one) and ends with
    exactly the results of the run it resumes (a pack's member is its run alone bit for bit:
    packs/member_wise)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "seeds": [0, 1, 2], "variants": ["kd"]}))
    out = tmp_path / "out"
    assert gemkd_run(spec, out) == 0
    reference = results(out)
    ledger = out / "runs.jsonl"
    lines = ledger.read_text().splitlines(keepends=True)
    torn = json.loads(lines[-1])["key"]
    assert torn.startswith("final|kd|")
    ledger.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    capsys.readouterr()
    assert gemkd_run(spec, out) == 0
    log = capsys.readouterr().out
    seed = torn.split("|")[2]
    assert f"kd              seed {seed}: NE" in log  # trained again
    pd.testing.assert_frame_equal(results(out), reference, check_exact=True)
    keys = [json.loads(line)["key"] for line in ledger.read_text().splitlines()]
    assert sorted(keys) == sorted(json.loads(line)["key"] for line in lines)  # torn tail cut
