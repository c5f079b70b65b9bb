"""``gemkd student export`` and ``gemkd score``: a run's kept student → an artifact, and an
artifact's scores for a dataset's days (:mod:`gemkd.experiments.artifacts`)."""

from __future__ import annotations

import argparse
import json

from gemkd.experiments.cli.declare import Command, Opt, arguments
from gemkd.experiments.cli.teacher import parse_days


def _export(args: argparse.Namespace) -> None:
    from gemkd.experiments.artifacts import StudentArtifact, export_student
    from gemkd.experiments.artifacts.student_artifact import SCHEMA
    from gemkd.experiments.report.day_unit import window_text

    out = export_student(**arguments(args))
    art = StudentArtifact(out)
    meta = art.meta
    window = window_text(json.loads((art.path / SCHEMA).read_text()), *meta["eval_days"])
    task = meta["tasks"][0]
    print(f"exported {meta['variant']} seed {meta['seed']} (lag {meta['lag']}, world "
          f"{meta['world']}; NE {task} {meta['metrics'].get(f'ne/{task}/all', float('nan')):.4f} "
          f"on {window}) to {out}")
    vocabs = meta["inputs"].get("vocabularies")
    print(f"id vocabularies: {', '.join(sorted(vocabs))} (raw ids -> codes: gemkd.encode_raw)"
          if vocabs else f"id vocabularies: none; {meta['inputs'].get('vocabularies_note')}")


def _score(args: argparse.Namespace) -> None:
    from gemkd.experiments.artifacts import score_artifact

    metrics = score_artifact(**arguments(args))
    tasks = sorted({k.split("/")[1] for k in metrics if k.startswith("ne/")})
    print(f"wrote {args.out}")
    for t in tasks:
        print(f"{t}: NE {metrics[f'ne/{t}/all']:.4f}  AUC {metrics[f'auc/{t}/all']:.4f}  "
              f"calibration {metrics[f'calibration/{t}/all']:.4f}  "
              f"({int(metrics[f'n/{t}/all'])} rows)")


COMMANDS = (
    Command(("student",), "students a run kept"),
    Command(("student", "export"), "a run's kept student -> an artifact (weights, config, "
            "input contract, code table, torch.export program)", run=_export,
            calls="gemkd.experiments.artifacts.student_export:export_student", options=(
                Opt("run_dir", "the run directory", metavar="RUN", param="run_dir"),
                Opt("--variant", "the variant whose student to export", required=True,
                    param="variant"),
                Opt("--seed", "its seed (default: the one the run kept)", type=int,
                    param="seed"),
                Opt("--lag", "its teacher lag (default: the one the run kept)", type=float,
                    param="lag"),
                Opt("--world", "its world (default: the one the run kept)", type=int,
                    param="world"),
                Opt("--out", "the artifact folder to create", required=True, metavar="DIR",
                    param="out"),
                Opt("--overwrite", "replace an existing artifact", flag=True,
                    param="overwrite"),
            )),
    Command(("score",), "an artifact's per-impression scores for a dataset's days, with NE, "
            "AUC and calibration", run=_score,
            calls="gemkd.experiments.artifacts.scoring:score_artifact", options=(
                Opt("artifact", "the artifact folder (gemkd student export)", metavar="ARTIFACT",
                    param="artifact"),
                Opt("--data", "the dataset to score", required=True, param="data"),
                Opt("--days", "half-open day range A:B", required=True, param="days",
                    convert=parse_days),
                Opt("--out", "the Parquet file of scores to write", required=True,
                    metavar="FILE", param="out"),
                Opt("--batch-size", "rows per program call", type=int, default=4096,
                    positive=True, param="batch_size"),
            )),
)
