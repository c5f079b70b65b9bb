"""A normal command prints no library warning or banner: `gemkd run` with EMA, the Student
Adapter, the LoopFM codes and a domain FM, `teacher fit` and `teacher export` leave stderr
empty; a bad export prints exactly its one error line; `-v` brings Lightning's info lines back;
every --help reads as plain text."""

from __future__ import annotations

import argparse
import re
import warnings

import yaml

from gemkd.experiments.cli import build_parser, main
from tests.faults.conftest import ROOT, SPEC

QUIET_SPEC = {
    **SPEC, "name": "quiet", "variants": ["baseline", "kd_aux_adapter", "kd_repr", "hierarchical"],
    "ema_decay": 0.9,
    "tuning": {"knobs": {"kd_weight": [1.0], "temperature": [1.0], "aux_beta": [1.0],
                         "adapter_hidden": [4], "lr": [0.01], "ema_decay": [0.9]}},
    "repr": {"layer": "trunk", "code_dim": 4, "bits": 8, "max_events": 10, "epochs": 1},
    "hierarchical": {"config": "domain_fm", "overrides": {"max_seq_len": 16, "max_steps": 4}},
}


def run_quietly(capsys, argv: list[str]) -> tuple[int, str, str, list[str]]:
    """``gemkd argv`` in this process with every Python warning recorded (none filtered but
    the ones gemkd itself installs)."""
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err, [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
                            for w in caught]


def test_run_fit_and_export_print_nothing_on_stderr(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(QUIET_SPEC))
    code, out, err, caught = run_quietly(
        capsys, ["run", str(spec), "--out", str(tmp_path / "run"), "--threads", "1"])
    assert code == 0, err[-3000:]
    assert err == "" and caught == [], (err[-3000:], caught)
    assert "kd_repr" in out and "hierarchical" in out
    # off a terminal, progress is plain timestamped lines: runs and steps counted up front
    progress = [line for line in out.splitlines() if " progress: " in line]
    assert re.fullmatch(r"\d\d:\d\d:\d\d progress: 0/4 student runs, 1/5 steps, "
                        r"\d+:\d\d elapsed, ETA \?", progress[0]), progress
    assert re.fullmatch(r"\d\d:\d\d:\d\d progress: 4/4 student runs, 5/5 steps, "
                        r"\d+:\d\d elapsed, ETA 0:00", progress[-1]), progress

    data = next((tmp_path / "run" / "cache").glob("data-*")) / "data"
    fit = ["teacher", "fit", "--config", str(ROOT / "experiments/teacher/configs/tiny.yaml"),
           "--data", str(data), "--out", str(tmp_path / "fit")]
    code, out, err, caught = run_quietly(capsys, fit)
    assert code == 0, err[-3000:]
    assert err == "" and caught == [], (err[-3000:], caught)
    assert out.startswith("trained gem-tiny to step")
    code, out, err, caught = run_quietly(capsys, [*fit, "--resume"])  # continues metrics.csv
    assert code == 0 and err == "" and caught == [], (err[-3000:], caught)
    rows = (tmp_path / "fit" / "metrics.csv").read_text().splitlines()
    assert len(rows) > 2 and rows[0].startswith("epoch")

    ckpt = tmp_path / "fit" / "checkpoints" / "last.ckpt"
    export = ["teacher", "export", "--ckpt", str(ckpt), "--data", str(data), "--out"]
    code, out, err, caught = run_quietly(capsys, [*export, str(tmp_path / "store")])
    assert code == 0 and err == "" and caught == [], (err[-3000:], caught)
    assert out.startswith("exported ")

    # a bad input: exactly the one error line, no banner before it
    code, out, err, caught = run_quietly(capsys, [*export, str(tmp_path / "s2"), "--days",
                                                  "0:99"])
    assert code == 2 and out == "" and caught == []
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: --days [0, 99): days 6..98 not in "), err

    # -v: Lightning's own info lines come back
    code, out, err, caught = run_quietly(capsys, ["-v", *export, str(tmp_path / "s3")])
    assert code == 0 and "GPU available" in err, err[-3000:]


def _helps(parser: argparse.ArgumentParser, name: str):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _helps(p, f"{name} {sub}")


def test_every_help_is_plain_text():
    helps = dict(_helps(build_parser(), "gemkd"))
    assert {"gemkd run", "gemkd teacher fit", "gemkd clean"} <= set(helps)
    for name, parser in helps.items():
        text = parser.format_help()
        assert parser.description, f"{name} --help has no description"
        for markup in ("``", ":func:", ":class:", ":mod:", "\x1b[", "**", "%("):
            assert markup not in text, (name, markup, text)
        assert all(line.isprintable() for line in text.splitlines()), (name, text)
