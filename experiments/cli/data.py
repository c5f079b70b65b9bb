"""``gemkd data ...``: generate, convert, inspect and validate datasets."""

from __future__ import annotations

import argparse
from pathlib import Path

MAPPINGS = Path(__file__).resolve().parents[1] / "data" / "mappings"  # shipped importer presets


def _synth(args: argparse.Namespace) -> None:
    from gemkd.transfer.config import load_dataclass
    from gemkd.transfer.data.synth import SynthConfig, generate

    overrides = {} if args.seed is None else {"seed": args.seed}
    cfg = load_dataclass(SynthConfig, args.config, overrides)
    schema = generate(cfg, args.out, overwrite=args.overwrite)
    print(f"wrote {schema.n_rows} examples over {len(schema.days)} days to {args.out}")
    if args.summary:
        _print_summary(args.out, oracle=True)


def _movielens(args: argparse.Namespace) -> None:
    from gemkd.transfer.data.movielens import convert_movielens

    schema = convert_movielens(args.src, args.out, n_days=args.n_days,
                               max_history=args.max_history, overwrite=args.overwrite)
    print(f"wrote {schema.n_rows} examples over {len(schema.days)} days, "
          f"domains {schema.domains}, to {args.out}")


def _kuairand(args: argparse.Namespace) -> None:
    from gemkd.transfer.data.importer import load_mapping
    from gemkd.transfer.data.kuairand import convert_kuairand

    tasks = None if args.tasks is None else [t.strip() for t in args.tasks.split(",")]
    result = convert_kuairand(args.src, args.out, load_mapping(MAPPINGS / "kuairand.yaml"),
                              tasks=tasks, min_domain_share=args.min_domain_share,
                              max_history=args.max_history, overwrite=args.overwrite)
    _print_imported(result, args.out)


def _import(args: argparse.Namespace) -> None:
    from gemkd.transfer.data.importer import import_logs, load_mapping

    result = import_logs(args.src, load_mapping(args.mapping), args.out,
                         overwrite=args.overwrite)
    _print_imported(result, args.out)


def _print_imported(result, out: str) -> None:
    for note in result.notes:
        print(f"note: {note}")
    s = result.schema
    print(f"wrote {s.n_rows} examples over {len(s.days)} days, tasks {s.tasks}, "
          f"domains {s.domains}, to {out}")


def _print_summary(path, oracle: bool) -> None:
    from gemkd.transfer.data.summary import feature_oracle_summary, impressions_per_user, summarize

    print_table(summarize(path))
    print("\nimpressions per user")
    print_table(impressions_per_user(path))
    frame = feature_oracle_summary(path) if oracle else None
    if frame is not None:
        print(f"\n{frame.attrs['title']}")
        print_table(frame.drop(columns=["max_events"]))


def _summary(args: argparse.Namespace) -> None:
    _print_summary(args.data, oracle=not args.no_oracle)
    if args.drift:
        from gemkd.transfer.data.drift import base_rate_drift

        print()
        print_table(base_rate_drift(args.data))


def _validate(args: argparse.Namespace) -> None:
    from gemkd.transfer.data.audit import validate_dataset

    reader = validate_dataset(args.data)
    print(f"ok: {reader.num_rows} rows in {len(reader.units)} row groups match "
          f"{args.data}/schema.json; example_id unique")


def print_table(frame) -> None:
    import pandas as pd

    with pd.option_context("display.max_columns", None, "display.width", 200,
                           "display.float_format", "{:.4f}".format):
        print(frame.to_string(index=False))


def add_parser(sub) -> None:
    data = sub.add_parser("data", help="generate, convert, inspect datasets")
    dsub = data.add_subparsers(dest="data_command", required=True)

    s = dsub.add_parser("synth", help="write the synthetic ads world")
    s.add_argument("--config", required=True, help="YAML of SynthConfig keys "
                   "(experiments/data/{tiny,small,base}.yaml)")
    s.add_argument("--out", required=True, help="output dataset directory")
    s.add_argument("--seed", type=int, default=None, help="override the config's seed")
    s.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    s.add_argument("--summary", action="store_true", help="print the per-day summary after")
    s.set_defaults(func=_synth)

    m = dsub.add_parser("movielens", help="convert MovieLens ratings.csv (+ movies.csv)")
    m.add_argument("--src", required=True, help="directory with ratings.csv [movies.csv]")
    m.add_argument("--out", required=True, help="output dataset directory")
    m.add_argument("--n-days", type=int, default=20, help="time buckets of equal size")
    m.add_argument("--max-history", type=int, default=1024, help="most recent events kept")
    m.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    m.set_defaults(func=_movielens)

    k = dsub.add_parser("kuairand", help="convert KuaiRand logs (+ user/video features)")
    k.add_argument("--src", required=True, help="directory with log_standard*.csv / "
                   "log_random*.csv [user_features*.csv, video_features_basic*.csv], or one log")
    k.add_argument("--out", required=True, help="output dataset directory")
    k.add_argument("--tasks", default=None, help="comma-separated, default click,long_view,like "
                   "(also: follow, comment, forward, hate, profile_enter)")
    k.add_argument("--min-domain-share", type=float, default=0.01,
                   help="tabs with a smaller share of rows are grouped into domain 'other'")
    k.add_argument("--max-history", type=int, default=1024, help="most recent events kept")
    k.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    k.set_defaults(func=_kuairand)

    im = dsub.add_parser("import", help="convert any event log with a mapping file "
                         "(docs/your_data.md)")
    im.add_argument("--src", required=True, help="a CSV/Parquet log, or a directory of them")
    im.add_argument("--mapping", required=True, help="YAML mapping of log columns to the schema")
    im.add_argument("--out", required=True, help="output dataset directory")
    im.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    im.set_defaults(func=_import)

    su = dsub.add_parser("summary", help="per-day table: rates, oracle NE, history lengths")
    su.add_argument("data", help="dataset directory")
    su.add_argument("--drift", action="store_true", help="also print the day-to-day movement "
                    "of each domain's base rates")
    su.add_argument("--no-oracle", action="store_true",
                    help="skip the feature-oracle table (synthetic data; ~20 s for small)")
    su.set_defaults(func=_summary)

    v = dsub.add_parser("validate", help="read every row and check it against schema.json")
    v.add_argument("data", help="dataset directory")
    v.set_defaults(func=_validate)
