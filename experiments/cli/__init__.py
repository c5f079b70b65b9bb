"""The gemkd command line. Every user error is one "error: ..." line and exit code 2; Ctrl-C is
one "interrupted: ..." line and exit code 130 (143 after SIGTERM).

Each command only parses its arguments and calls a library function (gemkd's Python API) with
them, so a notebook can do exactly what a command does. Every option is declared once, in its
command's table (:mod:`gemkd.experiments.cli.declare`); docs/reference/cli.md is generated from
the parser (``make reference``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from gemkd.experiments.cli.declare import COMMAND, Command, Opt, add_commands
from gemkd.transfer.errors import ConfigError, GemkdError

DESCRIPTION = ("Teacher-student knowledge transfer for ads ranking: make or import data, train "
               "and export a teacher, and measure how much of it reaches small students. Every "
               "command exits 0 on success and 2 on bad input, printing one line 'error: ...'.")
EPILOG = ("Run 'gemkd COMMAND --help' for a command's options; docs/reference/cli.md lists "
          "every command and option.")
VERBOSE = Opt("--verbose", "also log progress details and Lightning's info lines (devices, "
              "model summary) to stderr", short="-v", flag=True)


def commands() -> tuple[Command, ...]:
    """Every command, in the order ``gemkd --help`` lists them."""
    from gemkd.experiments.cli import clean, data, plan, run, serving, store, teacher

    return (*data.COMMANDS, *teacher.COMMANDS, *store.COMMANDS, *run.COMMANDS, *plan.COMMANDS,
            *serving.COMMANDS, *clean.COMMANDS)


def build_parser() -> argparse.ArgumentParser:
    from gemkd.experiments.version import __version__

    p = argparse.ArgumentParser(prog="gemkd", description=DESCRIPTION, epilog=EPILOG)
    VERBOSE.add_to(p)
    p.add_argument("--version", action="version", version=f"gemkd {__version__}")
    add_commands(p, commands())
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from gemkd.experiments.cli import interrupt
    from gemkd.transfer import stderr_output

    parser = build_parser()
    args = parser.parse_args(argv)
    command: Command = getattr(args, COMMAND)
    stderr_output.configure(args.verbose, lightning=args.command in ("teacher", "run"))
    with interrupt.handled():
        try:
            _check_counts(command, args)
            args.func(args)
        except GemkdError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except (KeyboardInterrupt, SystemExit) as e:
            if not interrupt.is_interrupt(e):
                raise
            newline = "\n" if sys.stderr.isatty() else ""  # past the terminal's ^C and a bar
            print(f"{newline}{_interrupted(command)}", file=sys.stderr, flush=True)
            return interrupt.exit_code()
        except BrokenPipeError:  # `gemkd data summary DIR | head`: the reader has what it wanted
            _quiet_stdout()
        except Exception as e:  # a full disk: one line naming the output, not a traceback
            from gemkd.transfer.io.disk_full import disk_full_error

            full = disk_full_error(e, getattr(args, "out", None))
            if full is None:
                raise
            print(f"error: {full}", file=sys.stderr)
            return 2
        finally:
            if "gemkd.transfer.training.trainer" in sys.modules:  # a command that trained
                from gemkd.transfer.training import release_process_group

                release_process_group()
    return 0


def _interrupted(command: Command) -> str:
    """The line an interrupted command prints: what is kept and how to go on."""
    from gemkd.experiments.cli import interrupt

    if command.words == ("run",):
        return interrupt.RUN_MESSAGE
    if command.words == ("teacher", "fit"):
        return ("interrupted: rerun the same command with --resume to continue from its last "
                "checkpoint")
    return "interrupted"


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of the closed pipe
    raises no second BrokenPipeError at exit (Python's documented recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # not a real file (a notebook, a capture)
        pass


def _check_counts(command: Command, args: argparse.Namespace) -> None:
    for opt in command.options:
        value = getattr(args, opt.dest)
        if opt.positive and value is not None and value < 1:
            raise ConfigError(f"{opt.name} must be >= 1, got {value}")


if __name__ == "__main__":
    sys.exit(main())
