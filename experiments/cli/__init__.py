"""The gemkd command line. Every user error is one "error: ..." line and exit code 2.

Each command only parses its arguments and calls a library function (gemkd's Python API) with
them, so a notebook can do exactly what a command does."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from gemkd.transfer.errors import ConfigError, GemkdError

DESCRIPTION = ("Teacher-student knowledge transfer for ads ranking: make or import data, train "
               "and export a teacher, and measure how much of it reaches small students. Every "
               "command exits 0 on success and 2 on bad input, printing one line 'error: ...'.")
EPILOG = "Run 'gemkd COMMAND --help' for a command's options; README.md has the full reference."
#: integer options that count something (threads, processes, rows, days): 0 or less is a mistake
COUNTS = ("threads", "workers", "devices", "num_nodes", "batch_size", "n_days", "max_history")


def build_parser() -> argparse.ArgumentParser:
    from gemkd.experiments.cli import clean, data, run, store, teacher
    from gemkd.experiments.version import __version__

    p = argparse.ArgumentParser(prog="gemkd", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also log progress details and Lightning's info lines (devices, model "
                        "summary) to stderr")
    p.add_argument("--version", action="version", version=f"gemkd {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    data.add_parser(sub)
    teacher.add_parser(sub)
    store.add_parser(sub)
    run.add_parser(sub)
    clean.add_parser(sub)
    _describe(p)
    return p


def _describe(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand's own --help the one-line summary its parent lists."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                sub = action.choices[choice.dest]
                if sub.description is None and choice.help:
                    sub.description = choice.help[0].upper() + choice.help[1:] + "."
                _describe(sub)


def main(argv: Sequence[str] | None = None) -> int:
    from gemkd.experiments.cli import output

    parser = build_parser()
    args = parser.parse_args(argv)
    output.configure(args.verbose, lightning=args.command in ("teacher", "run"))
    try:
        _check_counts(args)
        args.func(args)
    except GemkdError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `gemkd data summary DIR | head`: the reader has what it wanted
        _quiet_stdout()
    finally:
        if "gemkd.transfer.training.trainer" in sys.modules:  # a command that trained or predicted
            from gemkd.transfer.training import release_process_group

            release_process_group()
    return 0


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of the closed pipe
    raises no second BrokenPipeError at exit (Python's documented recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # not a real file (a notebook, a capture)
        pass


def _check_counts(args: argparse.Namespace) -> None:
    for name in COUNTS:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


if __name__ == "__main__":
    sys.exit(main())
