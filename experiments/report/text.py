"""The report's tables and its generated "what it means" sentences (never canned).

A run with per-user evaluation files gets interval tables and verdicts
(:mod:`gemkd.experiments.report.verdicts`); an older run keeps mean ± std over seeds, and its
sentences compare differences with the seed spread without calling any of them a verdict."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from gemkd.experiments.report.base_rate import above_one_sentence
from gemkd.experiments.report.no_signal import constant_note, no_signal_tasks
from gemkd.experiments.report.summary import RunView, f4, lag_str, md_table, pm, seed_stats
from gemkd.experiments.report.verdicts import interval_sentences, interval_table
from gemkd.experiments.run_dir.results_schema import BASELINE, KD

#: How a run without per-user files words a difference beyond its seed spread.
NO_VERDICT = "but without per-user evaluation files that is seed spread on one world, not a verdict"


def metric_row(r: pd.Series, oracle: bool = True) -> list[str]:
    """The table cells of one summary row: with an oracle, the gap closed to it; without one
    (real data), calibration instead, since a base rate moving between the student's and the
    evaluation days moves NE for reasons that are not ranking (DESIGN §2.4)."""
    last = (pm(r["gap_closed_mean"], r["gap_closed_std"]) if oracle
            else pm(r["calibration_mean"], r["calibration_std"]))
    return [
        pm(r["ne_mean"], r["ne_std"]),
        pm(r["delta_ne_mean"], r["delta_ne_std"]),
        pm(r["transfer_ratio_mean"], r["transfer_ratio_std"]),
        pm(r["efficiency_vs_kd_mean"], r["efficiency_vs_kd_std"]),
        pm(r["auc_mean"], r["auc_std"]),
        last,
        str(int(r["n_seeds"])),
    ]


def metric_header(oracle: bool = True) -> tuple[str, ...]:
    return ("NE (mean ± std)", "ΔNE vs baseline", "TR", "efficiency vs KD", "AUC",
            "gap closed to oracle" if oracle else "calibration (Σp/Σy)", "seeds")


def main_table(run: RunView) -> str:
    if run.has_intervals:
        return interval_table(run)
    rows = [[r["variant"], *metric_row(r, run.has_oracle)] for _, r in run.rows().iterrows()]
    return md_table(("variant", *metric_header(run.has_oracle)), rows)


def reference_line(run: RunView, task: str) -> str:
    """The evaluation slice's references: baseline, teacher, oracle and feature oracle NE, and
    the teacher's share of the baseline's gap to them (how much there is to transfer)."""
    ref = run.reference(task=task)
    line = f"baseline NE {pm(*ref['ne_baseline'])}, teacher NE {pm(*ref['ne_teacher'])}"
    if not math.isfinite(ref["ne_oracle"][0]):
        return line + ", oracle unknown (real data)"
    line += f", oracle NE {pm(*ref['ne_oracle'])}"
    if math.isfinite(ref["ne_feature_oracle"][0]):
        line += f", feature oracle NE {pm(*ref['ne_feature_oracle'])}"
    line += f"; teacher share of the oracle gap {pct(*ref['teacher_share'])}"
    if math.isfinite(ref["teacher_share_feature"][0]):
        line += f" (of the feature-oracle gap {pct(*ref['teacher_share_feature'])})"
    return line


def ne_above_one(run: RunView, tasks: list[str] | None = None) -> str:
    """Why an NE above 1 in the shown rows (``tasks``: the main task by default) is not a bug:
    the sentence to put under the table (:mod:`gemkd.experiments.report.base_rate`), and for
    every task where no model beats the constant the note that nothing was learnt
    (:mod:`gemkd.experiments.report.no_signal`); empty when neither applies."""
    above: dict[str, tuple[list[str], dict[str, float]]] = {}
    for task in tasks or [run.task]:
        if run.has_intervals:
            iv = run.interval_rows(task=task)
            ne = dict(zip(iv["variant"], iv["ne"], strict=True))
        else:
            rows = run.rows(task=task)
            ne = dict(zip(rows["variant"], rows["ne_mean"], strict=True))
        over = [v for v, x in ne.items() if math.isfinite(x) and x > 1]
        if over:
            above[task] = (over, ne)
    flat = constant_note(run, no_signal_tasks(run, tasks or [run.task]))
    return " ".join(p for p in (above_one_sentence(run, above) if above else "", flat) if p)


def pct(mean: float, std: float) -> str:
    if not math.isfinite(mean):
        return "—"
    return f"{100 * mean:.1f} %" + (f" ± {100 * std:.1f}" if math.isfinite(std) else "")




def paired_diff(cell: pd.DataFrame, a: str, b: str, col: str = "ne") -> tuple[float, float]:
    """Mean and std over seeds of ``a - b`` in ``col``, paired on (world, seed) when ≥ 2
    match."""
    keys = [k for k in ("world", "seed") if k in cell.columns]
    sa = cell[cell["variant"] == a].set_index(keys)[col]
    sb = cell[cell["variant"] == b].set_index(keys)[col]
    common = sa.index.intersection(sb.index)
    if len(common) >= 2:
        return seed_stats(sa.loc[common] - sb.loc[common])
    ma, va = float(sa.mean()), float(sa.var()) if len(sa) > 1 else math.nan
    mb, vb = float(sb.mean()), float(sb.var()) if len(sb) > 1 else math.nan
    return ma - mb, math.sqrt(va + vb)


def vs_2std(mean: float, std: float) -> tuple[bool | None, str]:
    """(exceeds 2 std?, phrase) for a difference; None when the spread is unknown."""
    if not math.isfinite(std):
        return None, "with a spread that one seed cannot estimate"
    exceeds = abs(mean) > 2 * std
    return exceeds, f"{'more than' if exceeds else 'within'} 2 std ({f4(2 * std)})"


def what_it_means(run_dir: str | Path) -> list[str]:
    """The two sentences of the report's "what it means" section, built from the numbers."""
    return sentences(RunView(run_dir))


def sentences(run: RunView) -> list[str]:
    if run.has_intervals:
        return interval_sentences(run)
    rows = run.rows().set_index("variant")
    cell = run.cell()
    where = f"on {run.task} at domain {run.domain} (teacher lag {lag_str(run.lag)} days)"
    methods = [v for v in rows.index if v != BASELINE and math.isfinite(rows.at[v, "ne_mean"])]
    methods.sort(key=lambda v: rows.at[v, "ne_mean"])
    has_kd = KD in rows.index and math.isfinite(rows.at[KD, "ne_mean"])

    def ne(v: str) -> str:
        return pm(rows.at[v, "ne_mean"], rows.at[v, "ne_std"])

    if not methods:
        first = (f"Only the labels-only baseline ran {where}, so there is no transfer method to "
                 f"rank.")
    elif not has_kd:
        best = methods[0]
        d, s = seed_stats(cell[cell["variant"] == best]["delta_ne"])
        _, phrase = vs_2std(d, s)
        first = (f"The best variant {where} is {best} with NE {ne(best)}, {f4(d)} below the "
                 f"baseline ({phrase}), but plain KD is not in this run so its efficiency "
                 f"against KD cannot be judged.")
    elif methods[0] != KD:
        best = methods[0]
        d, s = paired_diff(cell, KD, best)
        exceeds, phrase = vs_2std(d, s)
        verdict = {True: NO_VERDICT,
                   False: "so it is not distinguishable from seed noise",
                   None: "so its significance is unknown"}[exceeds]
        first = (f"The best variant {where} is {best} with NE {ne(best)}, {f4(d)} ± {f4(s)} "
                 f"below plain KD ({ne(KD)}), {phrase} of the per-seed difference, {verdict}.")
    elif len(methods) == 1:
        first = (f"Plain KD is the only transfer method {where} (NE {ne(KD)}), so there is "
                 f"nothing richer to rank it against.")
    else:
        runner = methods[1]
        d, s = paired_diff(cell, runner, KD)
        exceeds, phrase = vs_2std(d, s)
        verdict = {True: NO_VERDICT,
                   False: "so plain KD's lead is within seed noise",
                   None: "so its significance is unknown"}[exceeds]
        first = (f"Plain KD is the best variant {where} with NE {ne(KD)}, and the runner-up "
                 f"{runner} is {f4(d)} ± {f4(s)} worse, {phrase} of the per-seed difference, "
                 f"{verdict}.")

    if not has_kd:
        second = ("Plain KD is not in this run, so it cannot be said whether KD beats the "
                  "labels-only baseline.")
    else:
        kd = cell[cell["variant"] == KD]
        d, s = seed_stats(kd["delta_ne"])
        tr = pm(*seed_stats(kd["transfer_ratio"]))
        exceeds, phrase = vs_2std(d, s)
        verb = (f"changes NE by {f4(d)}" if f4(d) == "0.0000" else
                f"lowers NE by {f4(d)}" if d >= 0 else f"raises NE by {f4(-d)}")
        if exceeds is None:
            verdict = "so whether KD beats the baseline is unknown"
        elif not exceeds:
            verdict = "so KD's effect over labels alone is not distinguishable from seed noise"
        else:
            verdict = NO_VERDICT
        second = (f"Plain KD {verb} ± {f4(s)} against the labels-only baseline (TR {tr}), "
                  f"{phrase}, {verdict}.")
    return [first, second]
