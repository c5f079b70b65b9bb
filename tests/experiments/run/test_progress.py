"""How far a run has got: the student runs and steps are counted before the first starts; on a
terminal one bar shows them with the elapsed time and an ETA, elsewhere plain timestamped lines
do (checked on a whole run in test_quiet.py); log.txt gets every message either way."""

from __future__ import annotations

import io
import os
from pathlib import Path

from gemkd.experiments.run.progress import Progress, clock
from gemkd.experiments.run.runner import count_work
from gemkd.experiments.spec.load import spec_from_mapping
from tests.faults.conftest import SPEC


def test_work_is_counted_up_front():
    spec = spec_from_mapping({**SPEC, "seeds": [0, 1], "teacher_lag_days": [0, 1],
                              "variants": ["baseline", "kd", "kd_repr", "hierarchical"],
                              "tuning": {"knobs": {"kd_weight": [0.5, 1.0, 2.0],
                                                   "temperature": [1.0], "lr": [0.01]}}})
    runs, steps = count_work(spec, makes_data=True)
    # per lag: baseline (lr fixed: nothing to search) its 2 final seeds; kd, kd_repr and
    # hierarchical a draw per final seed of 3 candidates each, + their 2 final seeds
    assert runs == 2 * (2 + 3 * (2 * 3 + 2))
    shared = spec_from_mapping({**SPEC, "seeds": [0, 1], "teacher_lag_days": [0, 1],
                                "variants": ["baseline", "kd", "kd_repr", "hierarchical"],
                                "tuning": {"draws": "shared", "knobs": {
                                    "kd_weight": [0.5, 1.0, 2.0], "temperature": [1.0]}}})
    assert count_work(shared, makes_data=True)[0] == 2 * (2 + 3 * (3 + 2))  # one draw
    # data once; per lag teacher, store, domain FMs, codes
    assert steps == 1 + 2 * 4


def test_one_bar_on_a_terminal(tmp_path):
    screen = io.StringIO()
    p = Progress(tmp_path / "log.txt", total_runs=4, total_steps=2, stream=screen, tty=True)
    p("[run] teacher (teacher-0)")
    p.step_done("teacher")
    p.step_done("store")
    p.run_done(None)  # reused from runs.jsonl: no estimate from it
    p.run_done(2.0)
    p("  kd seed 0: NE click 0.9000")
    p.close()
    text = screen.getvalue()
    assert "steps 2/2" in text and "2/4 student runs" in text and "ETA 0:04" in text, text
    assert "[run] teacher (teacher-0)" in text and "progress:" not in text
    log = (tmp_path / "log.txt").read_text()
    assert "kd seed 0: NE click" in log and "student runs" not in log  # the bar stays on screen


def test_a_terminal_without_a_size_still_gets_the_bar(tmp_path):
    """A process on a pseudo-terminal reporting 0 columns (script, IDE runners): tqdm drew
    nothing there. The child writes to its own stdout, the pty, as `gemkd run` does."""
    import pty
    import subprocess
    import sys

    code = ("import os, sys; from pathlib import Path; "
            "from gemkd.experiments.run.progress import Progress; "
            "assert os.get_terminal_size(1).columns == 0; "
            f"p = Progress(Path({str(tmp_path / 'log.txt')!r}), 3, 1); "
            "p.run_done(1.0); p.close()")
    master, slave = pty.openpty()
    child = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave,
                             stderr=slave, close_fds=True, start_new_session=True,
                             cwd=str(Path(__file__).resolve().parents[3]))
    os.close(slave)
    screen = b""
    while True:  # drain until the child has closed its end
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    os.close(master)
    assert child.wait(timeout=60) == 0, screen.decode()
    text = screen.decode()
    assert "1/3 student runs" in text and "progress:" not in text, text


def test_clock():
    assert [clock(s) for s in (0, 59.6, 61, 3725)] == ["0:00", "1:00", "1:01", "1:02:05"]


def test_piped_progress_is_a_line_per_tenth_of_the_runs_not_per_run(tmp_path):
    """Trap 10: a piped run of 135 student runs printed 135 progress lines."""
    screen = io.StringIO()
    p = Progress(tmp_path / "log.txt", total_runs=135, total_steps=2, stream=screen, tty=False,
                 every=3600.0)
    p.step_done("teacher")  # a finished step always says so
    for _ in range(135):
        p.run_done(0.1)
    p.close()
    lines = [line for line in screen.getvalue().splitlines() if " progress: " in line]
    assert len(lines) == 1 + 10, lines  # the step, then each tenth (the last run is one)
    assert "0/135 student runs, 1/2 steps" in lines[0]
    assert "14/135 student runs" in lines[1] and "135/135 student runs" in lines[-1]


def test_piped_progress_also_comes_every_few_seconds(tmp_path):
    screen = io.StringIO()
    p = Progress(tmp_path / "log.txt", total_runs=1000, total_steps=1, stream=screen,
                 tty=False, every=0.0)
    for _ in range(3):
        p.run_done(0.1)
    p.close()
    assert screen.getvalue().count(" progress: ") == 3


def test_a_teacher_fit_reports_where_it_is(tiny_data, tmp_path):
    """Trap 10: nothing was printed during a 7-minute teacher fit when piped."""
    import yaml

    from gemkd.experiments.run.progress import FitProgress
    from gemkd.experiments.teacher.teacher_fit import fit_teacher
    from tests.faults.conftest import ROOT

    values = yaml.safe_load((ROOT / "experiments/teacher/configs/tiny.yaml").read_text())
    values.update(max_seq_len=16, max_steps=-1, batch_size=1024, train_days=[0, 1],
                  val_days=[1, 2])
    lines: list[str] = []
    fit_teacher(values_config(tmp_path, values), tiny_data, tmp_path / "fit", progress=False,
                callbacks=[FitProgress(lines.append, "teacher", every=0.0)])
    batches = [line for line in lines if ", batch " in line]
    n = len(batches)  # a line after every batch here (every=0)
    assert n > 1 and batches[0].startswith(f"teacher: epoch 1/1, batch 1/{n} (")
    assert batches[-1].startswith(f"teacher: epoch 1/1, batch {n}/{n} (100 %), ")
    assert batches[0].endswith(" elapsed")
    (done,) = [line for line in lines if "epoch done" in line]
    assert done.startswith("teacher: epoch 1/1, ") and ", validation loss " in done


def values_config(tmp_path: Path, values: dict) -> Path:
    import yaml

    path = tmp_path / "teacher.yaml"
    path.write_text(yaml.safe_dump(values))
    return path
