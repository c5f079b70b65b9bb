"""A bad ``gemkd run`` spec, in any section: one ``error:`` line naming the key or the class,
exit code 2, and no run directory — checked before any data or teacher work starts.

Top-level unknown keys and variants are covered in tests/experiments/run/test_run.py; these are the
nested sections, which used to fail only once their step ran (after data generation, teacher
training and export for the student), leaving a half-made run directory behind.
"""

from __future__ import annotations

import pytest
import yaml

from tests.faults.conftest import SPEC, cli_error

CASES = [
    ("batch_size=big", "--set batch_size=big: key 'batch_size': expected an integer, got "
                       "'big'"),
    ("teacher.overrides.max_stepz=3",
     "spec teacher (config tiny): unknown key 'max_stepz'; valid keys:"),
    ("teacher.overrides.max_steps=many",
     "spec teacher (config tiny): key 'max_steps': expected an integer, got 'many'"),
    ("data.overrides.examples_per_dya=10",
     "spec data (preset tiny): unknown key 'examples_per_dya'"),
    ("data.overrides.drift=strong",
     "spec data (preset tiny): key 'drift': expected a number, got 'strong'"),
    ("tuning.knobs.kd_wieght=[1.0]", "spec tuning.knobs: unknown knob 'kd_wieght'; this spec's "
                                     "variants tune: kd_weight, lr, temperature"),
    ("tuning.knobs.kd_weight=1.0",
     "--set tuning.knobs.kd_weight=1.0: key 'tuning': key 'knobs': knob 'kd_weight' must be "
     "a non-empty list"),
    # the sections are closed: a key of the config a section points at goes under overrides
    ("data.examples_per_day=10",
     "--set data.examples_per_day=10: key 'data': unknown key 'examples_per_day'; valid keys: "
     "overrides, preset, seeds, source, src (a key of the source's own config goes under "
     "'overrides')"),
    ("teacher.max_steps=10",
     "--set teacher.max_steps=10: key 'teacher': unknown key 'max_steps'; valid keys: config, "
     "overrides, store (a key of the teacher config goes under 'overrides')"),
    ("tuning.sampl=tpe", "--set tuning.sampl=tpe: key 'tuning': unknown key 'sampl'; valid keys: "
                         "batch, draws, knobs, sampler, seed, seeds, trials (did you mean "
                         "'sampler'?)"),
    ("data.overrides.examples_per_dya=10",
     "spec data (preset tiny): unknown key 'examples_per_dya'"),
    ("student.hidden=[8]", "--set student.hidden=[8]: key 'student': unknown key 'hidden' "
                           "(expected class_path, init_args)"),
    ("student.class_path=my_studentz.tower.TwoTower",
     "student class_path 'my_studentz.tower.TwoTower' could not be imported "
     "(ModuleNotFoundError: No module named 'my_studentz')"),
    ("student.class_path=gemkd.students.mlp_student.Nope",
     "student class_path 'gemkd.students.mlp_student.Nope' could not be imported: module "
     "'gemkd.students.mlp_student' has no attribute 'Nope'"),
    ("student.init_args={hiden: [8]}", "student MLPStudent: unknown init_args.hiden"),
    ("student.init_args={hidden: wide}", "student MLPStudent: init_args.hidden must be"),
    ("student_tasks=[clik]", "student_tasks: unknown task 'clik'; spec data (synthetic, preset "
                             "tiny) has tasks click, conversion, engage"),
    ("student_tasks=[]", "--set student_tasks=[]: 'student_tasks' must list at least one task, "
                         "each once"),
    ("student_days=[1,2]", "--set student_days=[1,2]: days must be ordered: teacher days before "
                           "teacher_days (3) <= student_days [1, 2] <= eval_days [5, 6]"),
]


@pytest.mark.parametrize("setting, message", CASES, ids=[setting for setting, _ in CASES])
def test_bad_spec_fails_before_writing(tmp_path, capsys, setting, message):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    err = cli_error(capsys, "run", str(spec), "--out", str(out), "--set", setting)
    assert err.startswith("error: " + message.format(spec=spec)), err
    assert not out.exists() and list(tmp_path.iterdir()) == [spec]


def test_an_error_of_the_file_names_the_file_even_with_sets(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "batch_size": "big"}))
    err = cli_error(capsys, "run", str(spec), "--out", str(tmp_path / "out"), "--set", "lr=0.1")
    assert err == f"error: {spec}: key 'batch_size': expected an integer, got 'big'", err
