"""``gemkd report RUN_DIR``: the tables, plain-language summary and plots of a benchmark run.

A run directory written by ``gemkd run`` holds ``results.csv`` (one row per variant × seed ×
domain × task × teacher lag), optionally ``tuning.csv``, ``curves/<variant>_seed<k>_lag<l>.csv``
and ``spec.yaml``. This module turns them into ``report.md`` and ``plots/*.png`` (DESIGN §6, §6.1):
every number is mean ± std over seeds, NE differences to 4 decimals, and the two "what it means"
sentences are generated from the numbers, never canned.

Conventions: std is the sample std over seeds (ddof=1; n/a with one seed); ±inf (a ratio with a
zero denominator, e.g. TR when the teacher is no better than the baseline) counts as missing; the
main tables use the smallest teacher lag (the freshest teacher).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transfer.config import load_yaml
from transfer.errors import ConfigError
from transfer.io.atomic import atomic_write_bytes

log = logging.getLogger(__name__)

#: Canonical order of the variants (DESIGN §6.1); unknown variants follow, sorted by name.
VARIANTS: tuple[str, ...] = (
    "baseline", "kd", "kd_aux", "kd_aux_adapter", "kd_repr", "hierarchical", "full",
)
KEYS: tuple[str, ...] = ("teacher_lag_days", "variant", "domain", "task")
#: Columns ``results.csv`` must have (``train_seconds``/``examples_per_second`` are optional).
REQUIRED_COLUMNS: tuple[str, ...] = (
    "variant", "seed", "domain", "task", "teacher_lag_days", "ne", "auc", "calibration",
    "ne_baseline", "ne_teacher", "ne_oracle", "delta_ne", "transfer_ratio", "efficiency_vs_kd",
)
NUMERIC_COLUMNS: tuple[str, ...] = (
    "seed", "teacher_lag_days", "ne", "auc", "calibration", "ne_baseline", "ne_teacher",
    "ne_oracle", "delta_ne", "transfer_ratio", "efficiency_vs_kd",
)
#: Metrics summarised as ``<metric>_mean`` / ``<metric>_std`` by :func:`summarize`.
METRICS: tuple[str, ...] = (
    "ne", "delta_ne", "transfer_ratio", "efficiency_vs_kd", "gap_closed", "auc", "calibration",
    "ne_baseline", "ne_teacher", "ne_oracle",
)
TUNING_COLUMNS: tuple[str, ...] = ("variant", "param", "value", "chosen", "val_ne")
CURVE_METRICS: tuple[str, ...] = ("train_loss", "kd_loss", "val_ne")
PLOT_NAMES: tuple[str, ...] = (
    "ne_by_variant.png", "transfer_ratio.png", "ne_vs_lag.png", "training_curves.png",
)
ALL = "all"
FIRST_TASK = "click"
_CURVE_NAME = re.compile(r"^(?P<variant>.+)_seed(?P<seed>-?\d+)_lag(?P<lag>-?\d+(?:\.\d+)?)$")


# ----------------------------------------------------------------------------- loading

def load_results(run_dir: str | Path) -> pd.DataFrame:
    """Read and validate ``run_dir/results.csv``; any problem is a one-line ConfigError."""
    path = Path(run_dir) / "results.csv"
    if not path.is_file():
        raise ConfigError(f"{path}: results file not found (run `gemkd run` first)")
    frame = _read_csv(path)
    return _validate(frame, str(path))


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        msg = " ".join(str(e).split())
        raise ConfigError(f"{path}: not a readable CSV: {msg}") from None


def _validate(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"{source}: missing column {missing[0]!r}"
            + (f" (and {', '.join(map(repr, missing[1:]))})" if missing[1:] else "")
            + f"; expected columns: {', '.join(REQUIRED_COLUMNS)}"
        )
    if frame.empty:
        raise ConfigError(f"{source}: no rows")
    out = frame.copy()
    for col in NUMERIC_COLUMNS:
        raw = out[col]
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna() & raw.notna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ConfigError(
                f"{source}: column {col!r} row {i + 1}: expected a number, got {raw.iloc[i]!r}"
            )
        out[col] = num.astype(float)
    for col in ("variant", "seed", "domain", "task", "teacher_lag_days"):
        empty = out[col].isna()
        if empty.any():
            i = int(np.flatnonzero(empty.to_numpy())[0])
            raise ConfigError(f"{source}: column {col!r} row {i + 1}: empty value")
    for col in ("variant", "domain", "task"):
        out[col] = out[col].astype(str)
    out["seed"] = out["seed"].astype(int)
    lags = out["teacher_lag_days"]
    if (lags == lags.round()).all():
        out["teacher_lag_days"] = lags.astype(int)
    dup = out.duplicated(subset=[*KEYS, "seed"])
    if dup.any():
        r = out[dup].iloc[0]
        raise ConfigError(
            f"{source}: duplicate row for variant={r['variant']} seed={r['seed']} "
            f"domain={r['domain']} task={r['task']} teacher_lag_days={r['teacher_lag_days']}"
        )
    return out


def _load_spec(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "spec.yaml"
    return load_yaml(path) if path.is_file() else None


def load_tuning(run_dir: str | Path) -> pd.DataFrame | None:
    """``run_dir/tuning.csv`` validated, or None when the run has none."""
    path = Path(run_dir) / "tuning.csv"
    if not path.is_file():
        return None
    frame = _read_csv(path)
    missing = [c for c in TUNING_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: missing column {missing[0]!r}; expected columns: "
                          f"{', '.join(TUNING_COLUMNS)}")
    out = frame.copy()
    out["chosen"] = [_truthy(v, path) for v in out["chosen"]]
    out["val_ne"] = pd.to_numeric(out["val_ne"], errors="coerce")
    out["variant"] = out["variant"].astype(str)
    out["param"] = out["param"].astype(str)
    return out


def _truthy(value: Any, path: Path) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "1", "1.0", "yes", "y"):
        return True
    if text in ("false", "0", "0.0", "no", "n", "", "nan"):
        return False
    raise ConfigError(f"{path}: column 'chosen': expected true/false, got {value!r}")


def load_curves(run_dir: str | Path) -> pd.DataFrame | None:
    """All ``curves/*.csv`` stacked with ``variant, seed, teacher_lag_days`` columns, or None."""
    cdir = Path(run_dir) / "curves"
    if not cdir.is_dir():
        return None
    parts = []
    for path in sorted(cdir.glob("*.csv")):
        m = _CURVE_NAME.match(path.stem)
        if m is None:
            log.warning("%s: name is not <variant>_seed<k>_lag<l>.csv; skipped", path)
            continue
        frame = _read_csv(path)
        for col in ("step", "train_loss"):
            if col not in frame.columns:
                raise ConfigError(f"{path}: missing column {col!r}; expected step, train_loss "
                                  "[, kd_loss, val_ne]")
        keep = [c for c in ("step", *CURVE_METRICS) if c in frame.columns]
        frame = frame[keep].apply(pd.to_numeric, errors="coerce")
        frame["variant"] = m["variant"]
        frame["seed"] = int(m["seed"])
        lag = float(m["lag"])
        frame["teacher_lag_days"] = int(lag) if lag.is_integer() else lag
        parts.append(frame)
    if not parts:
        return None
    return pd.concat(parts, ignore_index=True)


# ----------------------------------------------------------------------------- summary

def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per (teacher_lag_days, variant, domain, task).

    Columns: the four keys, ``n_seeds``, then ``<m>_mean`` and ``<m>_std`` for every metric in
    :data:`METRICS` — ``gap_closed = (ne_baseline - ne) / (ne_baseline - ne_oracle)`` per row,
    NaN where the oracle is unknown. Rows: lag ascending, variants in canonical order, domain
    ``all`` first, task ``click`` first.
    """
    df = _validate(results, "results")
    df["gap_closed"] = _gap_closed(df)
    vals = df[[*KEYS, "seed", *METRICS]].copy()
    vals[list(METRICS)] = vals[list(METRICS)].replace([np.inf, -np.inf], np.nan)
    groups = vals.groupby(list(KEYS), sort=False)
    agg = groups[list(METRICS)].agg(["mean", "std"])
    agg.columns = [f"{m}_{s}" for m, s in agg.columns]
    # efficiency is undefined on a seed where plain KD did not gain: then for the whole cell,
    # rather than a mean over the seeds that happen to be defined
    undefined = vals["efficiency_vs_kd"].isna().groupby([vals[k] for k in KEYS],
                                                         sort=False).any()
    agg.loc[undefined[undefined].index, ["efficiency_vs_kd_mean", "efficiency_vs_kd_std"]] = \
        np.nan
    n = groups["seed"].nunique().rename("n_seeds")
    out = pd.concat([n, agg], axis=1).reset_index()
    return _sort(out, _task_order(df))


def _gap_closed(df: pd.DataFrame) -> pd.Series:
    denom = df["ne_baseline"] - df["ne_oracle"]
    ok = df["ne_oracle"].notna() & (denom.abs() > 1e-12)
    gap = (df["ne_baseline"] - df["ne"]) / denom.where(ok)
    return gap.where(ok)


def _variant_rank(name: str) -> tuple[int, str]:
    return (VARIANTS.index(name), "") if name in VARIANTS else (len(VARIANTS), name)


def _variant_order(names: Sequence[str]) -> list[str]:
    return sorted(set(names), key=_variant_rank)


def _domain_order(names: Sequence[str]) -> list[str]:
    return sorted(set(names), key=lambda d: (d != ALL, d))


def _task_order(df: pd.DataFrame) -> list[str]:
    tasks = list(dict.fromkeys(df["task"]))
    if FIRST_TASK in tasks:
        tasks.remove(FIRST_TASK)
        tasks.insert(0, FIRST_TASK)
    return tasks


def _sort(summary: pd.DataFrame, tasks: list[str]) -> pd.DataFrame:
    v = {name: i for i, name in enumerate(_variant_order(summary["variant"]))}
    d = {name: i for i, name in enumerate(_domain_order(summary["domain"]))}
    t = {name: i for i, name in enumerate(tasks)}
    ranks = pd.DataFrame({
        "lag": summary["teacher_lag_days"],
        "d": summary["domain"].map(d),
        "t": summary["task"].map(t),
        "v": summary["variant"].map(v),
    })
    order = ranks.sort_values(["lag", "d", "t", "v"], kind="stable").index
    return summary.loc[order].reset_index(drop=True)


# ----------------------------------------------------------------------------- formatting

def _f4(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    r = round(float(x), 4)
    return f"{0.0 if r == 0 else r:.4f}"


def _pm(mean: float, std: float) -> str:
    if mean is None or not math.isfinite(mean):
        return "—"
    return f"{_f4(mean)} ± {_f4(std) if std is not None and math.isfinite(std) else 'n/a'}"


def _lag_str(lag: Any) -> str:
    return f"{lag:g}" if isinstance(lag, float) else str(lag)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """A Markdown table; the first ``left`` columns are labels (left-aligned), numbers right."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _seed_stats(values: pd.Series) -> tuple[float, float]:
    v = values.replace([np.inf, -np.inf], np.nan).dropna()
    if v.empty:
        return math.nan, math.nan
    return float(v.mean()), float(v.std()) if len(v) > 1 else math.nan


class _Run:
    """Everything a report needs, loaded once from a run directory."""

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        self.raw = load_results(self.dir)
        self.summary = summarize(self.raw)
        self.spec = _load_spec(self.dir)
        self.tasks = _task_order(self.raw)
        self.lags = sorted(self.raw["teacher_lag_days"].unique().tolist())
        self.lag = self.lags[0]
        self.domains = _domain_order(self.raw["domain"])
        self.domain = ALL if ALL in self.domains else self.domains[0]
        self.task = self.tasks[0]
        self.variants = _variant_order(self.raw["variant"])
        name = (self.spec or {}).get("name")
        self.name = str(name) if name else self.dir.resolve().name

    def rows(self, *, lag: Any = None, domain: str | None = None,
             task: str | None = None) -> pd.DataFrame:
        """Summary rows (one per variant) of a lag × domain × task slice (default: the main)."""
        return self._slice(self.summary, lag, domain, task)

    def cell(self, *, lag: Any = None, domain: str | None = None,
             task: str | None = None) -> pd.DataFrame:
        """Per-seed result rows of the same slice."""
        return self._slice(self.raw, lag, domain, task)

    def _slice(self, frame: pd.DataFrame, lag: Any, domain: str | None,
               task: str | None) -> pd.DataFrame:
        keep = ((frame["teacher_lag_days"] == (self.lag if lag is None else lag))
                & (frame["domain"] == (domain or self.domain))
                & (frame["task"] == (task or self.task)))
        return frame[keep]

    def reference(self, **where: Any) -> dict[str, tuple[float, float]]:
        """Baseline, teacher and oracle NE (mean, std over seeds) on this evaluation slice."""
        per_seed = self.cell(**where).groupby("seed")[["ne_baseline", "ne_teacher", "ne_oracle"]]
        per_seed = per_seed.mean()
        return {c: _seed_stats(per_seed[c]) for c in per_seed.columns}


def _metric_row(r: pd.Series) -> list[str]:
    return [
        _pm(r["ne_mean"], r["ne_std"]),
        _pm(r["delta_ne_mean"], r["delta_ne_std"]),
        _pm(r["transfer_ratio_mean"], r["transfer_ratio_std"]),
        _pm(r["efficiency_vs_kd_mean"], r["efficiency_vs_kd_std"]),
        _pm(r["gap_closed_mean"], r["gap_closed_std"]),
        str(int(r["n_seeds"])),
    ]


METRIC_HEADER = ("NE (mean ± std)", "ΔNE vs baseline", "TR", "efficiency vs KD",
                 "gap closed to oracle", "seeds")


def _main_table(run: _Run) -> str:
    rows = [[r["variant"], *_metric_row(r)] for _, r in run.rows().iterrows()]
    return _md_table(("variant", *METRIC_HEADER), rows)


def _reference_line(run: _Run, task: str) -> str:
    ref = run.reference(task=task)
    oracle = ref["ne_oracle"]
    o = _pm(*oracle) if math.isfinite(oracle[0]) else "unknown (real data)"
    return (f"baseline NE {_pm(*ref['ne_baseline'])}, teacher NE {_pm(*ref['ne_teacher'])}, "
            f"oracle NE {o}")


# ----------------------------------------------------------------------------- what it means

def _paired_diff(cell: pd.DataFrame, a: str, b: str, col: str = "ne") -> tuple[float, float]:
    """Mean and std over seeds of ``a - b`` in ``col``, paired on seed when ≥ 2 seeds match."""
    sa = cell[cell["variant"] == a].set_index("seed")[col]
    sb = cell[cell["variant"] == b].set_index("seed")[col]
    common = sa.index.intersection(sb.index)
    if len(common) >= 2:
        return _seed_stats(sa.loc[common] - sb.loc[common])
    ma, va = float(sa.mean()), float(sa.var()) if len(sa) > 1 else math.nan
    mb, vb = float(sb.mean()), float(sb.var()) if len(sb) > 1 else math.nan
    return ma - mb, math.sqrt(va + vb)


def _vs_2std(mean: float, std: float) -> tuple[bool | None, str]:
    """(exceeds 2 std?, phrase) for a difference; None when the spread is unknown."""
    if not math.isfinite(std):
        return None, "with a spread that one seed cannot estimate"
    exceeds = abs(mean) > 2 * std
    return exceeds, f"{'more than' if exceeds else 'within'} 2 std ({_f4(2 * std)})"


def what_it_means(run_dir: str | Path) -> list[str]:
    """The two sentences of the report's "what it means" section, built from the numbers."""
    return _what_it_means(_Run(run_dir))


def _what_it_means(run: _Run) -> list[str]:
    rows = run.rows().set_index("variant")
    cell = run.cell()
    where = f"on {run.task} at domain {run.domain} (teacher lag {_lag_str(run.lag)} days)"
    methods = [v for v in rows.index if v != "baseline" and math.isfinite(rows.at[v, "ne_mean"])]
    methods.sort(key=lambda v: rows.at[v, "ne_mean"])
    has_kd = "kd" in rows.index and math.isfinite(rows.at["kd", "ne_mean"])

    def ne(v: str) -> str:
        return _pm(rows.at[v, "ne_mean"], rows.at[v, "ne_std"])

    if not methods:
        first = (f"Only the labels-only baseline ran {where}, so there is no transfer method to "
                 f"rank.")
    elif not has_kd:
        best = methods[0]
        d, s = _seed_stats(cell[cell["variant"] == best]["delta_ne"])
        _, phrase = _vs_2std(d, s)
        first = (f"The best variant {where} is {best} with NE {ne(best)}, {_f4(d)} below the "
                 f"baseline ({phrase}), but plain KD is not in this run so its efficiency "
                 f"against KD cannot be judged.")
    elif methods[0] != "kd":
        best = methods[0]
        d, s = _paired_diff(cell, "kd", best)
        exceeds, phrase = _vs_2std(d, s)
        verdict = {True: "so it is a real gain over plain KD",
                   False: "so it is not distinguishable from seed noise",
                   None: "so its significance is unknown"}[exceeds]
        first = (f"The best variant {where} is {best} with NE {ne(best)}, {_f4(d)} ± {_f4(s)} "
                 f"below plain KD ({ne('kd')}), {phrase} of the per-seed difference, {verdict}.")
    elif len(methods) == 1:
        first = (f"Plain KD is the only transfer method {where} (NE {ne('kd')}), so there is "
                 f"nothing richer to rank it against.")
    else:
        runner = methods[1]
        d, s = _paired_diff(cell, runner, "kd")
        exceeds, phrase = _vs_2std(d, s)
        verdict = {True: "so plain KD's lead is real",
                   False: "so plain KD's lead is within seed noise",
                   None: "so its significance is unknown"}[exceeds]
        first = (f"Plain KD is the best variant {where} with NE {ne('kd')}, and the runner-up "
                 f"{runner} is {_f4(d)} ± {_f4(s)} worse, {phrase} of the per-seed difference, "
                 f"{verdict}.")

    if not has_kd:
        second = ("Plain KD is not in this run, so it cannot be said whether KD beats the "
                  "labels-only baseline.")
    else:
        kd = cell[cell["variant"] == "kd"]
        d, s = _seed_stats(kd["delta_ne"])
        tr = _pm(*_seed_stats(kd["transfer_ratio"]))
        exceeds, phrase = _vs_2std(d, s)
        verb = f"lowers NE by {_f4(d)}" if d >= 0 else f"raises NE by {_f4(-d)}"
        if exceeds is None:
            verdict = "so whether KD beats the baseline is unknown"
        elif not exceeds:
            verdict = "so KD's effect over labels alone is not distinguishable from seed noise"
        elif d > 0:
            verdict = "so KD beats the baseline and the teacher's knowledge reaches the student"
        else:
            verdict = "so KD hurts this student"
        second = (f"Plain KD {verb} ± {_f4(s)} against the labels-only baseline (TR {tr}), "
                  f"{phrase}, {verdict}.")
    return [first, second]


# ----------------------------------------------------------------------------- report

def render_report(run_dir: str | Path) -> str:
    """The Markdown text of ``report.md`` for a run directory (nothing is written)."""
    return _render(_Run(run_dir))


def _render(run: _Run) -> str:
    out: list[str] = [f"# gemkd report: {run.name}", ""]
    where = f"domain {run.domain}, task {run.task}, teacher lag {_lag_str(run.lag)} days"
    out += [
        f"Run directory `{run.dir}`. Every number is mean ± std over seeds (sample std); "
        "ΔNE = NE(baseline) − NE(variant), TR = ΔNE / (NE(baseline) − NE(teacher)), "
        "efficiency vs KD = ΔNE / ΔNE(plain KD), gap closed = ΔNE / (NE(baseline) − NE(oracle)).",
        "",
    ]
    few = run.summary[run.summary["n_seeds"] < 3]
    if not few.empty:
        out += [f"**Warning:** {len(few)} cell(s) have fewer than 3 seeds (min "
                f"{int(few['n_seeds'].min())}); DESIGN §6 asks for ≥ 3.", ""]

    out += [f"## Main result ({where})", "", _main_table(run), "",
            f"Same evaluation data: {_reference_line(run, run.task)}.", ""]

    out += ["## What it means", "", " ".join(_what_it_means(run)), ""]
    kd_gain = run.cell()
    kd_gain = kd_gain[kd_gain["variant"] == "kd"]["delta_ne"]
    if len(kd_gain) and not (kd_gain > 0).all():
        out += ["**Efficiency vs KD is not defined here** (shown as —): plain KD did not lower "
                f"NE on {int((kd_gain <= 0).sum())} of {len(kd_gain)} seeds, and a ratio to a "
                "gain that is not a gain means nothing; compare the ΔNE column instead.", ""]

    out += [f"## Every task (domain {run.domain}, teacher lag {_lag_str(run.lag)} days)", ""]
    rows = []
    for task in run.tasks:
        for _, r in run.rows(task=task).iterrows():
            rows.append([task, r["variant"], *_metric_row(r)])
    out += [_md_table(("task", "variant", *METRIC_HEADER), rows, left=2), ""]
    out += [f"- {task}: {_reference_line(run, task)}" for task in run.tasks] + [""]

    if len(run.domains) > 1:
        out += [f"## ΔNE vs baseline by domain (task {run.task}, teacher lag "
                f"{_lag_str(run.lag)} days)", ""]
        s = run.summary[(run.summary["teacher_lag_days"] == run.lag)
                        & (run.summary["task"] == run.task)]
        rows = []
        for v in run.variants:
            sv = s[s["variant"] == v].set_index("domain")
            rows.append([v] + [_pm(sv.at[d, "delta_ne_mean"], sv.at[d, "delta_ne_std"])
                               if d in sv.index else "—" for d in run.domains])
        out += [_md_table(("variant", *run.domains), rows), ""]

    if len(run.lags) > 1:
        out += _lag_section(run)

    out += _tuning_section(run)
    out += _setup_section(run)

    present = [n for n in PLOT_NAMES if (run.dir / "plots" / n).is_file()]
    if present:
        out += ["## Plots", ""] + [f"![{n[:-4]}](plots/{n})" for n in present] + [""]
    return "\n".join(out).rstrip() + "\n"


def _lag_section(run: _Run) -> list[str]:
    out = [f"## ΔNE vs teacher lag (domain {run.domain}, task {run.task})", "",
           "Rows are variants, columns the teacher's age in days; the last row is the teacher's "
           "own advantage ΔNE_FM = NE(baseline) − NE(teacher) on the same data.", ""]
    s = run.summary[(run.summary["domain"] == run.domain) & (run.summary["task"] == run.task)]
    rows = []
    for v in run.variants:
        sv = s[s["variant"] == v].set_index("teacher_lag_days")
        rows.append([v] + [_pm(sv.at[lag, "delta_ne_mean"], sv.at[lag, "delta_ne_std"])
                           if lag in sv.index else "—" for lag in run.lags])
    fm = []
    for lag in run.lags:
        c = run.cell(lag=lag).groupby("seed")[["ne_baseline", "ne_teacher"]].mean()
        fm.append(_pm(*_seed_stats(c["ne_baseline"] - c["ne_teacher"])))
    rows.append(["teacher (ΔNE_FM)", *fm])
    out += [_md_table(("variant", *(f"lag {_lag_str(lag)}" for lag in run.lags)), rows), ""]
    return out


def _tuning_section(run: _Run) -> list[str]:
    out = ["## Tuning (validation day)", ""]
    tuning = load_tuning(run.dir)
    if tuning is None:
        return out + ["No `tuning.csv` in this run: every variant used the spec's values.", ""]
    rows = []
    for v in _variant_order(tuning["variant"]):
        tv = tuning[tuning["variant"] == v]
        for param in dict.fromkeys(tv["param"]):
            tp = tv[tv["param"] == param]
            tried = ", ".join(str(x) for x in dict.fromkeys(tp["value"]))
            chosen = tp[tp["chosen"]]
            value = ", ".join(str(x) for x in dict.fromkeys(chosen["value"])) or "—"
            val_ne = _f4(float(chosen["val_ne"].min())) if not chosen.empty else "—"
            rows.append([v, param, tried, value, val_ne])
    out += ["Every variant gets the same budget; efficiency is against the tuned plain KD.", "",
            _md_table(("variant", "param", "tried", "chosen", "val NE (chosen)"), rows, left=4), ""]
    return out


def _knob(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_knob(v)}" for k, v in value.items()) or "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_knob(v) for v in value) + "]"
    return str(value)


def _setup_section(run: _Run) -> list[str]:
    out = ["## Setup (spec.yaml)", ""]
    if run.spec is None:
        return out + ["No `spec.yaml` in this run directory.", ""]
    for key, label in (("data", "data"), ("student", "student"), ("seeds", "seeds"),
                       ("teacher_lag_days", "teacher lags (days)"), ("variants", "variants")):
        if key in run.spec:
            out.append(f"- {label}: `{_knob(run.spec[key])}`")
    return out + [""]


def write_plots(run_dir: str | Path) -> list[Path]:
    """Write the run's PNGs under ``run_dir/plots/`` (see ``experiments.report_plots``)."""
    from experiments.report_plots import write_run_plots

    return write_run_plots(_Run(run_dir))


def write_report(run_dir: str | Path) -> Path:
    """Render and write ``run_dir/report.md`` atomically; return its path."""
    return _write_report(_Run(run_dir))


def _write_report(run: _Run) -> Path:
    path = run.dir / "report.md"
    atomic_write_bytes(path, _render(run).encode("utf-8"))
    return path


# ----------------------------------------------------------------------------- command

def report_command(run_dir: str | Path) -> str:
    """``gemkd report RUN_DIR``: write the plots and report.md; return the text to print."""
    from experiments.report_plots import write_run_plots

    run = _Run(run_dir)
    plots = write_run_plots(run)
    report = _write_report(run)
    where = (f"domain {run.domain}, task {run.task}, teacher lag {_lag_str(run.lag)} days")
    lines = [f"{run.name}: {where}", _main_table(run), "", " ".join(_what_it_means(run)), "",
             f"wrote {report}"] + [f"wrote {p}" for p in plots]
    return "\n".join(lines)
