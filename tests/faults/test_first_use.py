"""The traps a new user's first trial hit, each reproduced: a single-domain log run
end to end, a bad fixed method value and every command-line or spec value caught before any
work, the ``error:`` line in log.txt, a plug-in edit that invalidates its steps, spec paths
relative to the spec, no traceback when a pipe closes, no empty step folders after a failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gemkd.transfer.errors import ConfigError
from tests.faults.conftest import ROOT, SPEC, TinyRun, cli_error, gemkd_run

EXAMPLES = ROOT / "docs" / "examples"
T0 = 1_700_000_000  # 2023-11-14 22:13 UTC: a plausible epoch time in seconds


def single_domain_log(folder: Path, n: int = 5000, days: int = 7) -> None:
    """A click log of one surface (no domain column): the importer names its domain ``all``."""
    rng = np.random.default_rng(0)
    ts = np.sort(T0 + rng.integers(0, days * 86400, n))
    user, item = rng.integers(0, 300, n), rng.integers(0, 200, n)
    p = 1 / (1 + np.exp(-((user % 7 - 3) * 0.3 + (item % 5 - 2) * 0.4 - 0.5)))
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"t": ts, "user": user, "item": item, "click": (rng.random(n) < p).astype(int),
                  "device": rng.integers(0, 3, n)}).to_csv(folder / "log.csv", index=False)
    (folder / "mapping.yaml").write_text(yaml.safe_dump({
        "source": "mylog", "time": "t", "user": "user", "item": "item",
        "labels": {"click": "click"}, "categorical": ["device"], "history": {"max_events": 20}}))


def import_spec(folder: Path, **changes) -> Path:
    """The fault tests' tiny spec on the log beside it, its paths relative to the spec."""
    spec = {**SPEC, "name": "first", "data": {"source": "import", "src": "log.csv",
                                              "overrides": {"mapping": "mapping.yaml"}},
            "eval_days": [5, 7], **changes}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("single-domain")
    single_domain_log(folder)
    return folder


def test_single_domain_log_runs_end_to_end(log_dir, tmp_path, monkeypatch):
    """Trap 1: a log without a domain key imported, then refused at the teacher step because
    its one domain is named 'all'. It runs, from another working directory (trap 5: src and
    mapping are read beside the spec), and its results hold one row per (variant, task)."""
    spec = import_spec(log_dir, variants=["baseline", "kd", "kd_aux_adapter"])
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert gemkd_run(spec, out) == 0
    df = pd.read_csv(out / "results.csv")
    assert sorted(df.variant) == ["baseline", "kd", "kd_aux_adapter"]
    assert set(df.domain) == {"all"} and set(df.task) == {"click"}
    assert np.isfinite(df["ne"]).all() and (df["ne"] > 0).all()
    recorded = yaml.safe_load((out / "spec.yaml").read_text())["data"]
    assert recorded["src"] == str(log_dir / "log.csv")  # absolute, as it was resolved
    assert recorded["overrides"]["mapping"] == str(log_dir / "mapping.yaml")


def test_set_paths_are_relative_to_the_working_directory(log_dir, tmp_path, monkeypatch):
    """A ``--set`` value is typed at the shell: relative to where the command runs."""
    from gemkd.experiments.spec import load_spec

    monkeypatch.chdir(log_dir.parent)
    spec = load_spec(import_spec(tmp_path), [f"data.src={log_dir.name}/log.csv"])
    assert spec.data.src == str(log_dir / "log.csv")
    assert spec.data.overrides["mapping"] == str(tmp_path / "mapping.yaml")  # from the file


def test_missing_src_is_named_before_any_work(log_dir, tmp_path, capsys, monkeypatch):
    """Trap 5: a src that is not there surfaced as 'side table not found' and left a run
    directory with a cache folder behind."""
    spec = import_spec(tmp_path)  # no log.csv beside this spec
    (tmp_path / "mapping.yaml").write_text((log_dir / "mapping.yaml").read_text())
    monkeypatch.chdir(log_dir)  # a log.csv in the working directory is not the spec's
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out))
    assert err == (f"error: spec data.src: {tmp_path / 'log.csv'} not found (a relative src is "
                   "read from the spec file's folder)"), err
    assert not out.exists()


def test_a_bad_fixed_method_value_fails_before_any_work(tmp_path, capsys, monkeypatch):
    """Trap 3: a fixed init_args value only the constructor rejects (EmbeddingKD's hidden must
    be >= 0; hidden is not tuned) was found after data, teacher, store and two student runs."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "variants": {
        "kd": ["kd"], "mine": ["kd", {"class_path": "my_methods.embedding_kd.EmbeddingKD",
                                      "init_args": {"hidden": -1}}]}}))
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out))
    assert err == ("error: variant 'mine': method 'my_methods.embedding_kd.EmbeddingKD': method "
                   "EmbeddingKD: invalid init_args (emb_weight and hidden must be >= 0)"), err
    assert not out.exists()


FAILING_METHOD = '''
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.methods import TransferMethod


class Fails(TransferMethod):
    """Passes every check; its loss raises, as a plug-in's bug found mid-run does."""

    def loss(self, step, out):
        raise ConfigError("Fails: this method always fails in its loss")
'''


def test_an_error_mid_run_ends_the_log(tmp_path, capsys, monkeypatch):
    """Trap 3: the ``error:`` line was printed but not written to RUN_DIR/log.txt; the steps
    that finished stay cached for the rerun."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "failing_method.py").write_text(FAILING_METHOD)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "variants": {"bad": ["failing_method.Fails"]}}))
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out), "--threads", "1")
    assert err == "error: Fails: this method always fails in its loss"
    last = (out / "log.txt").read_text().strip().splitlines()[-1]
    assert last.split(" ", 1)[1] == err  # after the time stamp
    assert len(list(out.glob("cache/*/DONE"))) == 3  # data, teacher, store: kept for a rerun


STUDENT = '''
from gemkd.students.mlp_student import MLPStudent


class Scaled(MLPStudent):
    """The MLP student with its logits times SCALE: an edit of SCALE changes its results."""

    SCALE = {scale}

    def forward(self, batch):
        out = super().forward(batch)
        out.logits = out.logits * self.SCALE
        return out
'''


def test_editing_a_plugin_reruns_its_steps(tmp_path, capsys, monkeypatch):
    """Trap 4: a changed student class rerun into the same --out returned the old results
    (the cache keys hashed gemkd's modules, not the user's)."""
    pkg = tmp_path / "mine" / "my_tower"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "student.py").write_text(STUDENT.format(scale=1.0))
    monkeypatch.syspath_prepend(str(pkg.parent))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "variants": ["baseline"], "student": {
        "class_path": "my_tower.student.Scaled", "init_args": {"hidden": [8]}}}))
    out = tmp_path / "out"
    assert gemkd_run(spec, out) == 0
    first = pd.read_csv(out / "results.csv")["ne"].to_numpy()
    (pkg / "student.py").write_text(STUDENT.format(scale=0.5))
    for name in [m for m in sys.modules if m.startswith("my_tower")]:  # a new process
        monkeypatch.delitem(sys.modules, name)
    capsys.readouterr()
    assert gemkd_run(spec, out) == 0
    log = capsys.readouterr().out
    assert "[cached] teacher" in log and "[cached] baseline" not in log  # only the student
    assert len((out / "runs.jsonl").read_text().splitlines()) == 2
    assert not np.allclose(pd.read_csv(out / "results.csv")["ne"].to_numpy(), first)


def test_plugin_code_hashes_the_users_package_only(tmp_path, monkeypatch):
    from gemkd.experiments.run.cache import plugin_code

    pkg = tmp_path / "my_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("K = 1\n")
    (pkg / "model.py").write_text("class A:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = plugin_code(["my_pkg.model.A", "mlp", "gemkd.students.mlp_student.MLPStudent"])
    assert list(before) == ["my_pkg.model.A"]  # built-in names and gemkd's own: STEP_CODE
    (pkg / "helpers.py").write_text("K = 2\n")  # a helper module of the same package
    assert plugin_code(["my_pkg.model.A"]) != before


def test_threads_zero_is_refused(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out), "--threads", "0")
    assert err == "error: --threads must be >= 1, got 0"
    assert not out.exists()


def test_an_empty_spec_file_is_refused(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("# nothing yet\n")
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out))
    assert err == (f"error: {spec}: the spec file is empty (no keys); name what to run, or "
                   "leave out the SPEC argument to run the quickstart")
    assert not out.exists()


def test_unknown_task_of_an_import_is_found_before_any_work(log_dir, tmp_path, capsys):
    spec = import_spec(log_dir)
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out), "--set",
                    "student_tasks=[clik]")
    assert err == (f"error: student_tasks: unknown task 'clik'; spec data (import, "
                   f"{log_dir / 'log.csv'}) has tasks click"), err
    assert not out.exists()


def test_summary_into_a_closed_pipe_is_quiet(tiny_run: TinyRun):
    """Trap 9: ``gemkd data summary DIR | head`` ended in a BrokenPipeError traceback."""
    gemkd = Path(sys.executable).parent / "gemkd"
    cmd = f"'{gemkd}' data summary '{tiny_run.data}' --no-oracle | head -1"
    res = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True,
                         timeout=120)
    assert res.stdout.startswith("day"), res.stdout
    assert "Traceback" not in res.stderr and res.returncode == 0, res.stderr


def test_a_step_that_failed_before_writing_leaves_no_folder(tmp_path):
    """Trap 9: a failed run left cache/teacher-* folders holding only config.json; a step that
    wrote work before failing keeps it (a rerun resumes from it)."""
    from gemkd.experiments.run.cache import cached_step

    def fails(step: Path) -> None:
        raise ConfigError("bad")

    def writes_then_fails(step: Path) -> None:
        (step / "run").mkdir()
        (step / "run" / "last.ckpt").write_text("weights")
        raise ConfigError("bad")

    for run in (fails, writes_then_fails):
        with pytest.raises(ConfigError):
            cached_step(tmp_path, run.__name__, {"x": 1}, run, log=lambda m: None)
    (kept,) = tmp_path.iterdir()
    assert kept.name.startswith("writes_then_fails-")
    assert json.loads((kept / "config.json").read_text())["config"] == {"x": 1}


def test_positive_only_log_runs_and_the_report_says_negatives_were_sampled(log_dir, tmp_path):
    """Negative sampling end to end: a log of clicks only, its negatives drawn by the importer,
    and the report says NE is against sampled negatives."""
    folder = tmp_path / "plays"
    folder.mkdir()
    log = pd.read_csv(log_dir / "log.csv")
    log[log.click == 1].to_csv(folder / "log.csv", index=False)
    mapping = yaml.safe_load((log_dir / "mapping.yaml").read_text())
    mapping["negatives"] = {"per_positive": 2, "from": "uniform", "seed": 0}
    (folder / "mapping.yaml").write_text(yaml.safe_dump(mapping))
    spec = import_spec(folder, variants=["baseline", "kd"])
    out = tmp_path / "out"
    assert gemkd_run(spec, out) == 0
    assert json.loads((out / "sampled_negatives.json").read_text())["per_positive"] == 2
    report = (out / "report.md").read_text()
    assert "against sampled negatives, not logged impressions" in report.split("\n\n")[2]
    df = pd.read_csv(out / "results.csv")
    assert np.isfinite(df["ne"]).all() and sorted(set(df.variant)) == ["baseline", "kd"]
