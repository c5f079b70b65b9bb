"""The ``gemkd`` command line. Every user error is one ``error: ...`` line and exit code 2."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from transfer.errors import GemkdError


def _data_synth(args: argparse.Namespace) -> None:
    from transfer.config import load_dataclass
    from transfer.data.synth import SynthConfig, generate

    overrides = {} if args.seed is None else {"seed": args.seed}
    cfg = load_dataclass(SynthConfig, args.config, overrides)
    schema = generate(cfg, args.out, overwrite=args.overwrite)
    print(f"wrote {schema.n_rows} examples over {len(schema.days)} days to {args.out}")
    if args.summary:
        _print_summary(args.out, oracle=True)


def _data_movielens(args: argparse.Namespace) -> None:
    from transfer.data.movielens import convert_movielens

    schema = convert_movielens(args.src, args.out, n_days=args.n_days,
                               max_history=args.max_history, overwrite=args.overwrite)
    print(f"wrote {schema.n_rows} examples over {len(schema.days)} days, "
          f"domains {schema.domains}, to {args.out}")


def _data_summary(args: argparse.Namespace) -> None:
    _print_summary(args.data, oracle=not args.no_oracle)


def _print_summary(path, oracle: bool) -> None:
    from transfer.data.summary import feature_oracle_summary, impressions_per_user, summarize

    _print_table(summarize(path))
    print("\nimpressions per user")
    _print_table(impressions_per_user(path))
    frame = feature_oracle_summary(path) if oracle else None
    if frame is not None:
        print(f"\n{frame.attrs['title']}")
        _print_table(frame.drop(columns=["max_events"]))


def _data_validate(args: argparse.Namespace) -> None:
    from transfer.data.reader import DatasetReader

    reader = DatasetReader(args.data, batch_size=65536)
    n = sum(len(b) for b in reader)
    print(f"ok: {n} rows in {len(reader.units)} row groups match {args.data}/schema.json")


def _print_table(frame) -> None:
    import pandas as pd

    with pd.option_context("display.max_columns", None, "display.width", 200,
                           "display.float_format", "{:.4f}".format):
        print(frame.to_string(index=False))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gemkd", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = p.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="generate, convert, inspect datasets")
    dsub = data.add_subparsers(dest="data_command", required=True)

    s = dsub.add_parser("synth", help="write the synthetic ads world")
    s.add_argument("--config", required=True, help="YAML of SynthConfig keys "
                   "(experiments/data/{tiny,small,base}.yaml)")
    s.add_argument("--out", required=True, help="output dataset directory")
    s.add_argument("--seed", type=int, default=None, help="override the config's seed")
    s.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    s.add_argument("--summary", action="store_true", help="print the per-day summary after")
    s.set_defaults(func=_data_synth)

    m = dsub.add_parser("movielens", help="convert MovieLens ratings.csv (+ movies.csv)")
    m.add_argument("--src", required=True, help="directory with ratings.csv [movies.csv]")
    m.add_argument("--out", required=True, help="output dataset directory")
    m.add_argument("--n-days", type=int, default=20, help="time buckets of equal size")
    m.add_argument("--max-history", type=int, default=1024, help="most recent events kept")
    m.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    m.set_defaults(func=_data_movielens)

    su = dsub.add_parser("summary", help="per-day table: rates, oracle NE, history lengths")
    su.add_argument("data", help="dataset directory")
    su.add_argument("--no-oracle", action="store_true",
                    help="skip the feature-oracle table (synthetic data; ~20 s for small)")
    su.set_defaults(func=_data_summary)

    v = dsub.add_parser("validate", help="read every row and check it against schema.json")
    v.add_argument("data", help="dataset directory")
    v.set_defaults(func=_data_validate)

    from experiments.teacher_cli import add_teacher_parser

    add_teacher_parser(sub)

    from experiments.run_cli import add_run_parsers

    add_run_parsers(sub)
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
