"""Each command-line option is declared once (its command's table in gemkd.experiments.cli) and
its default is the library parameter's it feeds, so the two cannot drift apart again (as
``gemkd teacher fit --logger`` did: "csv" on the command line, None in ``fit_teacher``)."""

from __future__ import annotations

import argparse
import inspect
import typing
from pathlib import Path

import pytest

from gemkd.experiments.cli import build_parser, commands, main
from gemkd.experiments.cli.declare import Command, Opt, library_default, resolve
from tests.conftest import ROOT

LEAVES = [c for c in commands() if c.run is not None]


def _parser_of(command: Command) -> argparse.ArgumentParser:
    p = build_parser()
    for word in command.words:
        (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        p = sub.choices[word]
    return p


def _action(command: Command, opt: Opt) -> argparse.Action:
    (action,) = [a for a in _parser_of(command)._actions if a.dest == opt.dest]
    return action


def _literal_values(hint: typing.Any) -> set[str] | None:
    """The values of the Literal in ``hint`` (``Strategy | None`` → its strategies)."""
    if typing.get_origin(hint) is typing.Literal:
        return set(typing.get_args(hint))
    found = [_literal_values(h) for h in typing.get_args(hint)]
    found = [f for f in found if f]
    return set().union(*found) if found else None


def _bound() -> list[tuple[Command, Opt, str, str]]:
    out = []
    for command in LEAVES:
        for opt in command.options:
            target = command.target(opt)
            if target is not None:
                out.append((command, opt, *target))
    return out


@pytest.mark.parametrize("command, opt, function, param", _bound(),
                         ids=[f"{c.name} {o.name}" for c, o, _, _ in _bound()])
def test_option_default_is_the_library_default(command, opt, function, param):
    params = inspect.signature(resolve(function)).parameters
    assert param in params, f"{command.name} {opt.name}: {function} has no parameter {param!r}"
    default = library_default(function, param)
    action = _action(command, opt)
    assert action.default == opt.parser_default  # the parser is the table
    if opt.own_default is not None:  # a deliberate difference, which the table says
        assert opt.own_default.strip()
        return
    if default is inspect.Parameter.empty:  # the library needs it: so does the command
        assert opt.required or (opt.positional and opt.nargs is None), (command.name, opt.name)
        return
    given = opt.convert(action.default) if opt.convert is not None else action.default
    assert given == default, (f"{command.name} {opt.name} defaults to {action.default!r} "
                              f"(→ {given!r}); {function}'s {param} to {default!r}")


def _literal_of(function: str, param: str) -> set[str] | None:
    hint = typing.get_type_hints(resolve(function)).get(param)
    return _literal_values(hint) if hint is not None else None


LITERALS = [b for b in _bound() if b[1].choices is not None and _literal_of(b[2], b[3])]


@pytest.mark.parametrize("command, opt, function, param", LITERALS,
                         ids=[f"{c.name} {o.name}" for c, o, _, _ in LITERALS])
def test_choices_are_the_parameters_literal(command, opt, function, param):
    """Where the library annotates the parameter with a Literal, the command offers exactly
    its values (and ``none`` where that stands for None)."""
    offered = set(opt.choices)
    if opt.convert is not None and "none" in offered and opt.convert("none") is None:
        offered.discard("none")
    assert offered == _literal_of(function, param)


def test_literal_choices_are_checked():
    assert {(c.name, o.name) for c, o, _, _ in LITERALS} >= {
        ("gemkd teacher fit", "--strategy"), ("gemkd teacher export", "--emb-dtype")}


@pytest.mark.parametrize("command", [c for c in LEAVES if c.calls is not None],
                         ids=lambda c: c.name)
def test_an_option_named_like_a_parameter_feeds_it(command):
    """An option that shares a name with a parameter of the command's function but is not
    bound to it would be a silent second default."""
    params = inspect.signature(resolve(command.calls)).parameters
    for opt in command.options:
        if opt.param is None:
            assert opt.dest not in params, f"{command.name} {opt.name}: bind it (param=...)"


def test_every_option_has_help():
    for command in commands():
        assert command.help, command.name
        for opt in command.options:
            assert opt.help.strip(), f"{command.name} {opt.name}"


def test_teacher_fit_calls_the_library_with_its_defaults(monkeypatch):
    import gemkd.experiments.teacher.teacher_fit as module

    params = inspect.signature(module.fit_teacher).parameters
    calls = []
    monkeypatch.setattr(module, "fit_teacher",
                        lambda **kw: calls.append(kw) or {"is_global_zero": False})
    assert main(["teacher", "fit", "--config", "c.yaml", "--data", "d", "--out", "o",
                 "--no-progress"]) == 0
    (kw,) = calls
    assert (kw.pop("config"), kw.pop("data"), kw.pop("out")) == ("c.yaml", "d", "o")
    assert kw.pop("progress") is False  # --no-progress
    assert kw == {k: params[k].default for k in kw}
    assert kw["tracker"] is None  # no tracker beyond metrics.csv, as fit_teacher's default

    calls.clear()
    assert main(["teacher", "fit", "--config", "c.yaml", "--data", "d", "--out", "o",
                 "--train-days", "2:5", "--stream", "--logger", "tensorboard"]) == 0
    assert (calls[0]["train_days"], calls[0]["stream"], calls[0]["tracker"]) == (
        (2, 5), True, "tensorboard")


def test_movielens_calls_the_library_with_its_defaults(monkeypatch, capsys):
    import gemkd.transfer.data.movielens as module

    real = inspect.signature(module.convert_movielens).parameters
    calls = []

    class Schema:
        n_rows, days, domains = 0, [], []

    monkeypatch.setattr(module, "convert_movielens", lambda **kw: calls.append(kw) or Schema)
    assert main(["data", "movielens", "--src", "s", "--out", "o"]) == 0
    assert calls == [{"src": "s", "out": "o", **{k: real[k].default for k in
                                                  ("n_days", "max_history", "overwrite")}}]


def _fake_converters(monkeypatch) -> list[dict]:
    """``convert_movielens`` and ``convert_kuairand`` recording their arguments."""
    from types import SimpleNamespace

    import gemkd.transfer.data.kuairand as kuairand
    import gemkd.transfer.data.movielens as movielens

    calls: list[dict] = []
    schema = SimpleNamespace(n_rows=0, days=[], domains=[], tasks=[], generator={})
    monkeypatch.setattr(movielens, "convert_movielens", lambda **kw: calls.append(kw) or schema)
    monkeypatch.setattr(kuairand, "convert_kuairand",
                        lambda **kw: calls.append(kw) or SimpleNamespace(schema=schema, notes=[]))
    return calls


SHIPPED = [("movielens", "DEFAULT_MOVIELENS", "movielens_latest_small"),
           ("kuairand", "DEFAULT_KUAIRAND", "kuairand_pure_slice")]


@pytest.mark.parametrize("command, constant, folder", SHIPPED, ids=[c for c, _, _ in SHIPPED])
def test_data_src_defaults_to_the_shipped_copy(command, constant, folder, monkeypatch, capsys):
    """Without --src the converters read the copy in datasets/, the folder a run spec's
    data.src defaults to; a given --src is passed on as it is."""
    from gemkd.experiments.run import data_sources

    calls = _fake_converters(monkeypatch)
    default = getattr(data_sources, constant)
    assert default == ROOT / "datasets" / folder and default.is_dir()  # this checkout ships it
    assert main(["data", command, "--out", "o"]) == 0
    assert calls[-1]["src"] == default
    assert main(["data", command, "--src", "elsewhere", "--out", "o"]) == 0
    assert calls[-1]["src"] == "elsewhere"


@pytest.mark.parametrize("command, constant, folder", SHIPPED, ids=[c for c, _, _ in SHIPPED])
def test_a_missing_shipped_copy_asks_for_src(command, constant, folder, monkeypatch, capsys,
                                             tmp_path):
    """An installed gemkd has no datasets/: without --src, one error line naming the absent
    default folder and the option to pass, before any conversion."""
    from gemkd.experiments.run import data_sources

    calls = _fake_converters(monkeypatch)
    absent = tmp_path / "no_checkout" / folder
    monkeypatch.setattr(data_sources, constant, absent)
    assert main(["data", command, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --src: not given, and its default {absent} ")
    assert "is absent" in err and "pass --src DIR" in err and err.count("\n") == 1
    assert calls == [] and not (tmp_path / "out").exists()
    assert main(["data", command, "--src", str(tmp_path), "--out", "o"]) == 0  # --src suffices
    assert calls == [{**calls[0], "src": str(tmp_path)}]


def test_a_count_below_one_is_one_error_line(capsys):
    assert main(["data", "movielens", "--src", "s", "--out", "o", "--n-days", "0"]) == 2
    assert capsys.readouterr().err == "error: --n-days must be >= 1, got 0\n"


def test_store_import_converts_its_lists(monkeypatch, tmp_path, capsys):
    import gemkd.transfer.store.importer as module

    calls = []

    class Manifest:
        total_rows, shards, tasks, layer, teacher_name = 0, [], [], None, "x"

    monkeypatch.setattr(module, "import_store", lambda **kw: calls.append(kw) or Manifest)
    argv = ["store", "import", "--src", "s", "--out", str(Path(tmp_path) / "o"), "--tasks",
            "click,like", "--trained-until-day", "3"]
    assert main(argv) == 0
    assert calls[-1]["tasks"] == ["click", "like"] and calls[-1]["logit_columns"] is None
    assert main([*argv, "--logit-column", "click=p"]) == 0
    assert calls[-1]["logit_columns"] == {"click": "p"}
    for bad in ("click", "=p", "click="):  # the one key=value parser, its values kept as text
        assert main([*argv, "--logit-column", bad]) == 2
        assert f"--logit-column {bad!r}: expected TASK=COLUMN" in capsys.readouterr().err
