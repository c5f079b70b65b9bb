"""Trap (c) of the first real log: adding one variant to a spec re-ran every study and student
run (runs.jsonl 47 → 105 lines, every study a new hash), because every run's key hashed the
whole variant list. A run's key now holds its own variant and the upstream steps it reads, so
adding a variant trains only the new variant's searches and runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gemkd.experiments.cli import main
from gemkd.experiments.run.inputs import inputs_tag, variant_tag
from gemkd.experiments.run.jobs import InputPaths
from gemkd.experiments.spec import load_spec

SPEC = {
    "name": "variantkeys", "seeds": [0], "data": {"source": "synthetic", "preset": "tiny"},
    "teacher": {"config": "tiny", "overrides": {"max_seq_len": 32, "max_steps": 20}},
    "teacher_days": 3, "student_days": [3, 5], "eval_days": [5, 6], "teacher_lag_days": 0,
    "student": {"class_path": "mlp", "init_args": {"hidden": [8]}},
    "student_tasks": ["click"],
    "variants": ["baseline", "kd"],
    "tuning": {"knobs": {"kd_weight": [0.5, 2.0], "temperature": [1.0], "aux_beta": [1.0],
                         "lr": [0.01]}},
}


def run(tmp_path: Path, variants: list[str], out: Path, capsys) -> str:
    spec = tmp_path / f"spec-{len(variants)}.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "variants": variants}))
    assert main(["run", str(spec), "--out", str(out)]) == 0
    return capsys.readouterr().out


def ledger(out: Path) -> list[str]:
    return [json.loads(line)["key"] for line in (out / "runs.jsonl").read_text().splitlines()]


def studies(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((out / "tuning").glob("*.journal"))}


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_adding_a_variant_runs_only_it(tmp_path, capsys):
    out = tmp_path / "out"
    run(tmp_path, ["baseline", "kd"], out, capsys)
    keys, journals = ledger(out), studies(out)
    before = pd.read_csv(out / "results.csv")
    assert len(keys) == 2 + 1 + 1  # kd's two validation runs, then one final run each
    log = run(tmp_path, ["baseline", "kd", "kd_aux"], out, capsys)
    added = ledger(out)[len(keys):]
    assert ledger(out)[:len(keys)] == keys
    assert len(added) == 2 + 1 and all(k.split("|")[1] == "kd_aux" for k in added), added
    # the earlier studies are the ones reused, with no new trial (reopening a study appends
    # Optuna's create-study record, op_code 0, as any rerun does); one new study, kd_aux's
    now = studies(out)
    for name, text in journals.items():
        assert now[name].startswith(text), name
        assert {json.loads(x)["op_code"] for x in now[name][len(text):].splitlines()} == {0}
    assert [k for k in now if k not in journals] == [n for n in now if n.startswith("kd_aux-")]
    assert len(now) == len(journals) + 1
    assert "[cached] baseline seed 0 (runs.jsonl)" in log and "[cached] kd seed 0" in log
    after = pd.read_csv(out / "results.csv")
    old = after[after.variant.isin(["baseline", "kd"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(old[before.columns], before, check_exact=False, rtol=1e-12)


def test_a_variant_tag_holds_what_the_variant_reads(tmp_path):
    """The baseline reads no teacher: a new store or codes step leaves its tag; KD's follows the
    store it distils from, not the codes or another teacher's store."""
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump({**SPEC, "variants": ["baseline", "kd", "full"]}))
    spec = load_spec(spec_file)
    base = InputPaths({"gem": tmp_path / "store-aaa" / "store"})
    more = InputPaths({"gem": tmp_path / "store-aaa" / "store",
                       "domain_fm": tmp_path / "domain_fm-bbb" / "store"},
                      codes=tmp_path / "codes-ccc" / "codes")
    other = InputPaths({"gem": tmp_path / "store-ddd" / "store"})
    cell = inputs_tag(spec, base, 1)

    def tags(inputs: InputPaths, name: str) -> str:
        return variant_tag(inputs_tag(spec, inputs, 1), spec, spec.variant(name), inputs)

    assert inputs_tag(spec, more, 1) == cell  # the cell's part: no upstream, no variants
    assert tags(base, "baseline") == tags(more, "baseline") == tags(other, "baseline")
    assert tags(base, "kd") == tags(more, "kd") != tags(other, "kd")
    assert tags(base, "full") != tags(more, "full")  # full reads the codes
    assert len({tags(base, v) for v in ("baseline", "kd", "full")}) == 3
    assert inputs_tag(spec, base, 1) != inputs_tag(spec, base, 2)  # threads stay in the key
