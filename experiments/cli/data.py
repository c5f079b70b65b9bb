"""``gemkd data ...``: generate, convert, inspect and validate datasets."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from gemkd.experiments.cli.declare import Command, Opt, arguments
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import IMPORT_ENGINES

MAPPINGS = Path(__file__).resolve().parents[1] / "data" / "mappings"  # shipped importer presets


def _synth(args: argparse.Namespace) -> None:
    from gemkd.transfer.config import load_dataclass
    from gemkd.transfer.data.synth import SynthConfig, generate

    overrides = {} if args.seed is None else {"seed": args.seed}
    cfg = load_dataclass(SynthConfig, args.config, overrides)
    schema = generate(cfg, **arguments(args, GENERATE))
    print(f"wrote {schema.n_rows} examples over {len(schema.days)} days to {args.out}")
    if args.summary:
        _print_summary(args.out, oracle=True)


def _movielens(args: argparse.Namespace) -> None:
    from gemkd.transfer.data.movielens import convert_movielens

    schema = convert_movielens(**arguments(args))
    print(f"wrote {schema.n_rows} examples over {len(schema.days)} days, "
          f"domains {schema.domains}, to {args.out}")


def _kuairand(args: argparse.Namespace) -> None:
    from gemkd.transfer.data.importer import load_mapping
    from gemkd.transfer.data.kuairand import convert_kuairand

    result = convert_kuairand(mapping=load_mapping(MAPPINGS / "kuairand.yaml"),
                              **arguments(args))
    _print_imported(result, args.out)


def _import(args: argparse.Namespace) -> None:
    from gemkd.transfer.data.importer import import_logs

    result = import_logs(**arguments(args))
    _print_imported(result, args.out)


def _print_imported(result, out: str) -> None:
    from gemkd.experiments.report.day_unit import day_unit

    for note in result.notes:
        print(f"note: {note}")
    s = result.schema
    unit = day_unit({"generator": s.generator})  # a bucketed import's days are buckets
    print(f"wrote {s.n_rows} examples over {len(s.days)} {unit}{'s' * (len(s.days) != 1)}, "
          f"tasks {s.tasks}, domains {s.domains}, to {out}")


def _print_summary(path, oracle: bool, all_days: bool = False) -> None:
    from gemkd.transfer.data.dataset_summary import (
        feature_oracle_summary,
        impressions_per_user,
        summarize,
        tables,
    )

    print_days(summarize(path), path, all_days)
    print("\ntables (rows of each feature's embedding table: its cardinality)")
    print_table(tables(path))
    print("\nimpressions per user")
    print_table(impressions_per_user(path))
    frame = feature_oracle_summary(path) if oracle else None
    if frame is not None:
        print(f"\n{frame.attrs['title']}")
        print_table(frame.drop(columns=["max_events"]))


SHOWN_DAYS = 20  # a summary of more days shows the first and last this many


def print_days(frame, path, all_days: bool) -> None:
    """The per-day table; of a dataset of many days (a thin log's calendar days) the first and
    last ``SHOWN_DAYS`` and ``all``, with a line on the days left out and the import's note on
    thin days, unless ``all_days``."""
    days = frame[frame["day"] != "all"]
    if all_days or len(days) <= 3 * SHOWN_DAYS:
        print_table(frame)
        return
    import pandas as pd

    from gemkd.transfer.data.schema import DatasetSchema

    hidden = days.iloc[SHOWN_DAYS:-SHOWN_DAYS]
    gap = {c: "" for c in frame.columns}
    gap["day"] = "..."
    shown = pd.concat([days.iloc[:SHOWN_DAYS], pd.DataFrame([gap]), days.iloc[-SHOWN_DAYS:],
                       frame[frame["day"] == "all"]], ignore_index=True)
    print_table(shown)
    n = hidden["examples"].astype(int)
    print(f"... {len(hidden):,} of {len(days):,} days not shown (days {hidden['day'].iloc[0]} "
          f"to {hidden['day'].iloc[-1]}: {int(n.sum()):,} examples, a median of "
          f"{n.median():g} a day); --all-days prints every day")
    notes = (DatasetSchema.load(path).generator or {}).get("notes") or []
    for note in notes:
        if isinstance(note, str) and note.startswith("days: thin"):
            print(f"note: {note}")


def _summary(args: argparse.Namespace) -> None:
    _print_summary(args.data, oracle=not args.no_oracle, all_days=args.all_days)
    if args.drift:
        from gemkd.transfer.data.drift import base_rate_drift

        print()
        print_table(base_rate_drift(args.data))


def _validate(args: argparse.Namespace) -> None:
    from gemkd.transfer.data.audit import validate_dataset
    from gemkd.transfer.data.part_digests import NO_DIGESTS

    reader = validate_dataset(**arguments(args))
    digests = reader.schema.part_sha256
    if not digests:
        print(f"note: {NO_DIGESTS.format(root=args.data)}")
    vocabularies = {e["file"] for e in (reader.schema.vocabularies or {}).values() if e.get("file")}
    print(f"ok: {reader.num_rows} rows in {len(reader.units)} row groups match "
          f"{args.data}/schema.json; example_id unique"
          + (f"; {len(digests)} part files match their sha256" if digests else "")
          + (f"; {len(vocabularies)} id vocabulary files match theirs" if vocabularies else ""))


def print_table(frame) -> None:
    import pandas as pd

    with pd.option_context("display.max_columns", None, "display.width", 200,
                           "display.float_format", "{:.4f}".format):
        print(frame.to_string(index=False))


def _not(flag: bool) -> bool:
    return not flag


def _task_list(text: str | None) -> list[str] | None:
    return None if text is None else [t.strip() for t in text.split(",")]


def _shipped(default: str, files: str) -> Callable[[str | None], str | Path]:
    """``--src``'s value, or where not given the copy a checkout ships in datasets/ (the
    ``data_sources`` constant named ``default``, a run spec's default ``data.src`` too); a
    ConfigError when that folder is not here (an installed gemkd without its repository)."""

    def convert(src: str | None) -> str | Path:
        if src is not None:
            return src
        from gemkd.experiments.run import data_sources  # not at import: gemkd --help stays light

        folder: Path = getattr(data_sources, default)
        if not folder.is_dir():
            raise ConfigError(f"--src: not given, and its default {folder} (the copy a gemkd "
                              "checkout ships in datasets/) is absent, as in a gemkd installed "
                              f"without its repository: pass --src DIR, the folder of the "
                              f"{files} files")
        return folder

    return convert


SHIPPED = ("the copy a checkout ships in datasets/, as a run spec's data.src; the library "
           "function has no default src")


def _load_mapping(path: str):
    from gemkd.transfer.data.importer import load_mapping

    return load_mapping(path)


GENERATE = "gemkd.transfer.data.synth:generate"
OUT = Opt("--out", "output dataset directory", required=True, param="out")
OVERWRITE = Opt("--overwrite", "replace an existing --out", flag=True, param="overwrite")
MAX_HISTORY = Opt("--max-history", "most recent events kept", type=int, default=1024,
                  positive=True, param="max_history")
DATA = Opt("data", "dataset directory")

COMMANDS = (
    Command(("data",), "generate, convert, inspect datasets"),
    Command(("data", "synth"), "write the synthetic ads world", run=_synth, options=(
        Opt("--config", "YAML of SynthConfig keys (experiments/data/{tiny,small,base}.yaml)",
            required=True),
        Opt("--out", OUT.help, required=True, param=f"{GENERATE}.out"),
        Opt("--seed", "override the config's seed", type=int),
        Opt("--overwrite", OVERWRITE.help, flag=True, param=f"{GENERATE}.overwrite"),
        Opt("--summary", "print the per-day summary after", flag=True),
    )),
    Command(("data", "movielens"), "convert MovieLens ratings (+ movies), CSV or Parquet",
            run=_movielens, calls="gemkd.transfer.data.movielens:convert_movielens", options=(
                Opt("--src", "directory with ratings [movies] .csv or .parquet (default: "
                    "the shipped datasets/movielens_latest_small, in a checkout)", param="src",
                    metavar="DIR", convert=_shipped("DEFAULT_MOVIELENS", "MovieLens"),
                    own_default=SHIPPED),
                OUT,
                Opt("--n-days", "time buckets of equal size", type=int, default=20,
                    positive=True, param="n_days"),
                MAX_HISTORY,
                OVERWRITE,
            )),
    Command(("data", "kuairand"), "convert KuaiRand logs (+ user/video features)",
            run=_kuairand, calls="gemkd.transfer.data.kuairand:convert_kuairand", options=(
                Opt("--src", "directory with log_standard* / log_random* [user_features*, "
                    "video_features_basic*] .csv or .parquet, or one log (default: the "
                    "shipped datasets/kuairand_pure_slice, in a checkout)", param="src",
                    convert=_shipped("DEFAULT_KUAIRAND", "KuaiRand"),
                    own_default=SHIPPED),
                OUT,
                Opt("--tasks", "comma-separated, default click,long_view,like (also: follow, "
                    "comment, forward, hate, profile_enter)", param="tasks",
                    convert=_task_list),
                Opt("--min-domain-share", "tabs with a smaller share of rows are grouped into "
                    "domain 'other'", type=float, default=0.01, param="min_domain_share"),
                MAX_HISTORY,
                OVERWRITE,
            )),
    Command(("data", "import"), "convert any event log with a mapping file "
            "(docs/guides/your_data.md)", run=_import,
            calls="gemkd.transfer.data.importer:import_logs", options=(
                Opt("--src", "a CSV/Parquet log, or a directory of them", required=True,
                    param="src"),
                Opt("--mapping", "YAML mapping of log columns to the schema", required=True,
                    param="mapping", convert=_load_mapping),
                OUT,
                OVERWRITE,
                Opt("--in-memory", "read the whole log at once instead of streaming it day by "
                    "day (same dataset; memory grows with the log)", flag=True,
                    param="streaming", convert=_not),
                Opt("--batch-rows", "rows read at a time when streaming", type=int,
                    default=262_144, positive=True, param="batch_rows"),
                Opt("--engine", "local: this process; ray: the streaming passes as tasks on "
                    "the Ray cluster at RAY_ADDRESS (or a local instance; pip install "
                    "'gemkd[ray]', an --out every node reads); the same dataset",
                    choices=IMPORT_ENGINES, default="local", param="engine"),
            )),
    Command(("data", "summary"), "per-day table: rates, oracle NE, history lengths",
            run=_summary, options=(
                DATA,
                Opt("--drift", "also print the day-to-day movement of each domain's base "
                    "rates", flag=True),
                Opt("--no-oracle", "skip the feature-oracle table (synthetic data; ~20 s for "
                    "small)", flag=True),
                Opt("--all-days", f"print every day (a dataset of more than {3 * SHOWN_DAYS} "
                    f"days shows its first and last {SHOWN_DAYS})", flag=True),
            )),
    Command(("data", "validate"), "read every row and check it against schema.json",
            run=_validate, calls="gemkd.transfer.data.audit:validate_dataset",
            options=(Opt("data", DATA.help, param="root"),)),
)
