"""The gemkd command line. Every user error is one "error: ..." line and exit code 2.

Each command only parses its arguments and calls a library function (gemkd's Python API) with
them, so a notebook can do exactly what a command does."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from transfer.errors import GemkdError


def build_parser() -> argparse.ArgumentParser:
    from experiments.cli import data, run, store, teacher
    from experiments.version import __version__

    p = argparse.ArgumentParser(prog="gemkd", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log progress and library messages to stderr")
    p.add_argument("--version", action="version", version=f"gemkd {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    data.add_parser(sub)
    teacher.add_parser(sub)
    store.add_parser(sub)
    run.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        args.func(args)
    except GemkdError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
