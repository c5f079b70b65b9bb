"""docs/reference/*.md are generated from the parser and the config dataclasses; the committed
pages must be what the sources give now, and every spec key must carry a doc."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gemkd.experiments.cli import commands
from gemkd.experiments.cli import reference as ref
from gemkd.experiments.cli.config_reference import cell, field_docs, undocumented
from gemkd.experiments.spec import run_spec
from gemkd.transfer.options import PROTOCOLS

ROOT = Path(__file__).resolve().parents[3]
SPEC_CLASSES = (run_spec.RunSpec, run_spec.DataSpec, run_spec.TeacherSpec, run_spec.PluginSpec,
                run_spec.VariantSpec, run_spec.TuningSpec, run_spec.BootstrapSpec,
                run_spec.ReprSpec, run_spec.SolarisSpec)


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return ref.render()


def test_committed_pages_are_current(pages):
    for name, text in pages.items():
        path = ROOT / "docs" / "reference" / name
        assert path.is_file() and path.read_text() == text, (
            f"docs/reference/{name} is out of date: run {ref.REGENERATE} and commit it")


def test_every_command_and_option_is_in_the_cli_page(pages):
    page = pages["cli.md"]
    for command in commands():
        assert f"# {command.name}\n" in page, command.name
        for opt in command.options:
            assert f"| `{opt.name}`" in page, (command.name, opt.name)
    assert "| `--logger` | one of `none`, `csv`, `tensorboard`, `mlflow` | `none` |" in page


def test_every_spec_key_has_type_default_and_doc(pages):
    page = pages["spec.md"]
    for cls in SPEC_CLASSES:
        assert not undocumented(cls), f"{cls.__name__}: add a #: comment above " \
                                      f"{undocumented(cls)} in experiments/spec/run_spec.py"
    for f in dataclasses.fields(run_spec.RunSpec):
        assert f"| `{f.name}` |" in page, f.name
    for key, cls in (("data", run_spec.DataSpec), ("tuning", run_spec.TuningSpec),
                     ("repr", run_spec.ReprSpec), ("hierarchical", run_spec.TeacherSpec)):
        for f in dataclasses.fields(cls):
            if f.name != "overrides":
                assert f"| `{key}.{f.name}` |" in page, (key, f.name)
    # a Literal's choices come from the alias itself; a section's own default shows
    assert f"| `teacher_protocol` | one of {', '.join(f'`{p}`' for p in PROTOCOLS)} | " \
           "`window` |" in page
    assert "| `hierarchical.config` | str | `domain_fm` |" in page
    assert "| `full` | `[kd, aux_head, repr]` | `gem` |" in page


def test_teacher_page_lists_every_config_key(pages):
    from gemkd.experiments.teacher.teacher_config import TeacherTrainConfig

    for f in dataclasses.fields(TeacherTrainConfig):
        assert f"| `{f.name}` |" in pages["teacher.md"], f.name
    assert "| `select` | one of `last`, `best` | `last` |" in pages["teacher.md"]


def test_check_names_a_stale_page_and_write_fixes_it(tmp_path, capsys):
    assert ref.main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"out of date: {tmp_path / 'cli.md'} (run make reference" in err
    assert ref.main(["--out", str(tmp_path)]) == 0
    assert ref.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "spec.md").write_text("edited by hand\n")
    assert ref.main(["--check", "--out", str(tmp_path)]) == 1
    assert "spec.md" in capsys.readouterr().err


def test_field_docs_read_the_comment_above_and_on_the_line():
    @dataclasses.dataclass
    class Example:
        #: the first line
        #: and the second
        a: int = 1
        b: int = 2  # on its line
        c: int = 3  # noqa: E501
        # a plain comment above counts too
        d: list[int] = dataclasses.field(default_factory=list)

    assert field_docs(Example) == {"a": "the first line and the second", "b": "on its line",
                                   "c": "", "d": "a plain comment above counts too"}


def test_cells_escape_markup_outside_code_spans():
    assert cell("a | b <task> *.csv `x|<y>`") == "a \\| b \\<task\\> \\*.csv `x\\|<y>`"
