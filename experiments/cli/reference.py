"""``python -m gemkd.experiments.cli.reference`` (``make reference``): write the reference pages
from the sources they describe, so they cannot drift from them:

- ``docs/reference/cli.md``: every command and option, read off the parser itself;
- ``docs/reference/spec.md``: every key of a ``gemkd run`` spec, from the spec dataclasses
  (:mod:`gemkd.experiments.spec.run_spec`);
- ``docs/reference/teacher.md``: every key of a teacher config
  (:class:`~gemkd.experiments.teacher.teacher_config.TeacherTrainConfig`).

``--check`` writes nothing and exits 1 naming the pages that differ from what the sources give
(tests/experiments/cli/test_reference.py does the same check).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from gemkd.experiments.cli.config_reference import (
    cell,
    field_docs,
    key_table,
    prose,
    yaml_value,
)
from gemkd.transfer.options import TEACHER_SOURCES

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is experiments/cli/)
OUT = ROOT / "docs" / "reference"
REGENERATE = "make reference (python -m gemkd.experiments.cli.reference)"


def _banner(source: str) -> str:
    return (f"<!-- Generated from {source} by {REGENERATE}; edit the source, not this "
            "file. -->")


# ---- the command line -------------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser
                 ) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield choice.dest, action.choices[choice.dest], choice.help or ""


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=10_000)  # one line, any terminal
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups,
                        prefix="")
    return formatter.format_help().strip()


def _kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "flag"
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        kind = "one of " + ", ".join(f"`{c}`" for c in action.choices)
    else:
        kind = getattr(action.type, "__name__", "str") if action.type else "str"
    if isinstance(action.nargs, int):
        kind += f" × {action.nargs}"
    elif action.nargs == "+":
        kind += ", one or more"
    if isinstance(action, argparse._AppendAction):
        kind += ", repeatable"
    return kind


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.nargs == 0:
        return "off"
    if action.default is None or action.default == []:
        return "—"
    return f"`{yaml_value(action.default)}`"


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.dest}`"
    metavar = action.metavar
    shown = " ".join(metavar) if isinstance(metavar, tuple) else metavar
    names = ", ".join(f"`{s}`" for s in action.option_strings)
    return f"{names} `{shown}`" if shown else names


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    if not rows:
        return []
    return ["| option | type | default | meaning |", "|---|---|---|---|",
            *(f"| {_name(a)} | {_kind(a)} | {_default(a)} | {cell(a.help or '')} |"
              for a in rows), ""]


def _anchor(title: str) -> str:
    return title.lower().replace(" ", "-")


def _command(parser: argparse.ArgumentParser, words: list[str], depth: int) -> list[str]:
    title = " ".join(["gemkd", *words])
    lines = [f"{'#' * depth} {title}", "", cell(parser.description or ""), "", "```",
             _usage(parser), "```", "", *_options(parser)]
    subs = list(_subcommands(parser))
    if subs:
        lines += ["| command | what it does |", "|---|---|"]
        lines += [f"| [`{title} {name}`](#{_anchor(f'{title} {name}')}) | {cell(h)} |"
                  for name, _, h in subs]
        lines.append("")
        for name, sub, _ in subs:
            lines += _command(sub, [*words, name], min(depth + 1, 4))
    return lines


def cli_page() -> str:
    from gemkd.experiments.cli import build_parser

    parser = build_parser()
    lines = [_banner("the gemkd parser (gemkd.experiments.cli, one table per command)"), "",
             "# Command-line reference", "",
             "Every command exits 0 on success, 2 on bad input (one line `error: ...`) and 130 "
             "when interrupted (Ctrl-C: one line `interrupted: ...`, also at the end of a "
             "run's `log.txt`). `gemkd COMMAND --help` prints the same as below.", ""]
    body = _command(parser, [], 2)
    body[0] = "## gemkd"
    return "\n".join([*lines, *body]).rstrip() + "\n"


# ---- the YAML configs -------------------------------------------------------------------------

def spec_page() -> str:
    from gemkd.experiments.spec import run_spec

    spec = run_spec.RunSpec()
    sections = {"data": (run_spec.DataSpec, spec.data),
                "teacher": (run_spec.TeacherSpec, spec.teacher),
                "student": (run_spec.PluginSpec, spec.student),
                "variants": (run_spec.VariantSpec, None),
                "tuning": (run_spec.TuningSpec, spec.tuning),
                "bootstrap": (run_spec.BootstrapSpec, spec.bootstrap),
                "primary": (run_spec.PrimarySpec, spec.primary),
                "robustness": (run_spec.RobustnessSpec, spec.robustness),
                "repr": (run_spec.ReprSpec, spec.repr),
                "solaris": (run_spec.SolarisSpec, spec.solaris),
                "hierarchical": (run_spec.TeacherSpec, spec.hierarchical)}
    lines = [_banner("the spec dataclasses in experiments/spec/run_spec.py (each key's comment)"),
             "", "# Experiment spec reference", "",
             "A `gemkd run` spec is one YAML file of the keys below "
             "(`experiments/quickstart.yaml` is one); a key left out takes its default. "
             "`--set a.b.c=value` overrides a key at any depth (the value is YAML, e.g. "
             "`--set seeds=[1,2,3]`). Paths in the file are read from the file's folder; "
             "paths given with `--set` from the working directory. Every section is closed: "
             "unknown keys (with the closest known one), wrong types and values outside a "
             "key's choices are errors naming the section and the key; keys of the config a "
             "section points at go under its `overrides`, knob ranges under `tuning.knobs`.",
             "",
             "## Top-level keys", "",
             *key_table(run_spec.RunSpec, spec, "", anchors={k: k for k in sections}), ""]
    for key, (cls, instance) in sections.items():
        lines += [f"## {key}", "", prose(cls.__doc__), ""]
        if key == "variants":
            lines += _variants(run_spec)
            continue
        lines += [*key_table(cls, instance, f"{key}."), ""]
    return "\n".join(lines).rstrip() + "\n"


def _variants(run_spec) -> list[str]:
    docs = field_docs(run_spec.VariantSpec)
    lines = ["`variants` is a list of the built-in variants' names (the default: "
             f"{', '.join(run_spec.DEFAULT_VARIANTS)}), or a mapping from a name to its methods (a "
             "list) or to a mapping of these keys:",
             "", "| key | type | default | meaning |", "|---|---|---|---|",
             f"| `methods` | list of methods | `[]` | {cell(docs['methods'])} |",
             f"| `teacher` | one of {', '.join(f'`{t}`' for t in TEACHER_SOURCES)} | "
             f"`gem` | {cell(docs['teacher'])} |",
             f"| `twin_of` | str or null | `null` | {cell(docs['twin_of'])} |", "",
             "The built-in variants:", "",
             "| variant | methods | teacher |", "|---|---|---|"]
    for name, value in run_spec.BUILTIN_VARIANTS.items():
        v = run_spec.VariantSpec.parse(name, value, "variants")
        lines.append(f"| `{name}` | `{yaml_value([m.to_dict() for m in v.methods])}` | "
                     f"`{v.teacher}` |")
    return [*lines, ""]


def teacher_page() -> str:
    from gemkd.experiments.teacher.teacher_config import TeacherTrainConfig

    return "\n".join([
        _banner("TeacherTrainConfig in experiments/teacher/teacher_config.py (each key's "
                "comment)"), "",
        "# Teacher config reference", "",
        "A teacher config is one flat YAML file (`experiments/teacher/configs/*.yaml`; "
        "`gemkd teacher fit --config FILE`, or a spec's `teacher.config`): `model:` holds the "
        "model class's keyword hyper-parameters and every other top-level key is one of "
        "these. " + prose(TeacherTrainConfig.__doc__), "",
        *key_table(TeacherTrainConfig, TeacherTrainConfig(), ""),
    ]).rstrip() + "\n"


PAGES: dict[str, Callable[[], str]] = {"cli.md": cli_page, "spec.md": spec_page,
                                       "teacher.md": teacher_page}


def render() -> dict[str, str]:
    """Page name → its Markdown."""
    return {name: page() for name, page in PAGES.items()}


def stale(out: Path = OUT) -> list[Path]:
    """The pages under ``out`` that differ from (or are missing against) the sources."""
    return [out / name for name, text in render().items()
            if not (out / name).is_file() or (out / name).read_text() != text]


def write(out: Path = OUT) -> list[Path]:
    """Write every page under ``out``; returns the pages that changed."""
    changed = stale(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (out / name).write_text(text)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gemkd.experiments.cli.reference",
                                description="Write docs/reference/*.md from the parser and the "
                                            "config dataclasses.")
    p.add_argument("--out", type=Path, default=OUT, help="folder of the pages")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a page differs from its source")
    args = p.parse_args(argv)
    if args.out == OUT and not (ROOT / "pyproject.toml").is_file():
        p.error("the pages belong in a gemkd checkout: run this from one, or give --out")
    if args.check:
        old = stale(args.out)
        for path in old:
            print(f"out of date: {path} (run {REGENERATE})", file=sys.stderr)
        return 1 if old else 0
    for path in write(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
