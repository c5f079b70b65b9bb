"""What spec.yaml asked for that results.csv lacks: an interrupted run (Ctrl-C
after a variant was added) lists the variant in spec.yaml and command.txt, and a report
rendered then would show it under Setup with no row. The report names such variants instead
of leaving a silent gap, and the ones with fewer runs than the spec's seeds × worlds × lags."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gemkd.experiments.run_dir.results_schema import WORLD
from gemkd.experiments.spec.run_spec import twin_name


def spec_variants(spec: dict[str, Any] | None) -> list[str]:
    """The variants a spec.yaml asks for, A/A twins included (their names as the run gives
    them); empty when it names none (the run then ran the built-in default set)."""
    variants = (spec or {}).get("variants")
    names = list(variants) if isinstance(variants, dict | list) else []
    names = [str(n) for n in names]
    twins = (spec or {}).get("twins") or {}
    if isinstance(twins, dict):
        for original, count in twins.items():
            names += [t for k in range(1, int(count) + 1)
                      if (t := twin_name(str(original), k)) not in names]
    return names


def _expected_runs(spec: dict[str, Any] | None) -> int | None:
    """Runs per variant the spec asks for (seeds × worlds × lags), None when it cannot say."""
    spec = spec or {}
    seeds, lags = spec.get("seeds"), spec.get("teacher_lag_days")
    worlds = (spec.get("data") or {}).get("seeds") if isinstance(spec.get("data"), dict) else None
    n_seeds = len(seeds) if isinstance(seeds, list) else seeds
    if not isinstance(n_seeds, int) or isinstance(n_seeds, bool) or n_seeds < 1:
        return None
    n_lags = len(lags) if isinstance(lags, list) and lags else 1
    n_worlds = len(worlds) if isinstance(worlds, list) and worlds else 1
    return n_seeds * n_worlds * n_lags


def missing_runs(spec: dict[str, Any] | None, results: pd.DataFrame
                 ) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """(variants of the spec with no row in results.csv, {variant: (runs found, runs the spec
    asks for)} for those with some but fewer); a run is a (world, seed, lag)."""
    present = set(results["variant"])
    absent = [v for v in spec_variants(spec) if v not in present]
    expected = _expected_runs(spec)
    partial: dict[str, tuple[int, int]] = {}
    if expected is not None:
        keys = [k for k in (WORLD, "seed", "teacher_lag_days") if k in results.columns]
        runs = results.drop_duplicates(["variant", *keys]).groupby("variant", sort=False).size()
        partial = {str(v): (int(n), expected) for v, n in runs.items() if n < expected}
    return absent, partial


def missing_note(spec: dict[str, Any] | None, results: pd.DataFrame) -> str:
    """The report's "missing runs" paragraph, empty when results.csv has every run asked for."""
    absent, partial = missing_runs(spec, results)
    if not absent and not partial:
        return ""
    parts = []
    if absent:
        parts.append(f"{', '.join(absent)} ({'is' if len(absent) == 1 else 'are'} in "
                     "spec.yaml but no run of "
                     f"{'it' if len(absent) == 1 else 'them'} finished: no row below)")
    if partial:
        parts.append(", ".join(f"{v} ({n} of {want} runs)" for v, (n, want) in partial.items()))
    return ("**Missing runs:** " + "; ".join(parts) + ". The run was interrupted or is still "
            "going: rerun the same `gemkd run` command to finish it (finished runs are reused), "
            "then `gemkd report` again.")
