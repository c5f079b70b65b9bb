"""The report's words for its primary family (:mod:`gemkd.experiments.report.family`): the
first paragraph's sentence (the family's size and level), the section listing each primary
comparison with its Holm-adjusted interval, and the headline — a primary comparison, never the
best of many."""

from __future__ import annotations

import math

import pandas as pd

from gemkd.experiments.report.family import Family
from gemkd.experiments.report.intervals import BEATS, GAIN, LOSS, UNRESOLVED
from gemkd.experiments.report.robustness import fragile, repeated
from gemkd.experiments.report.summary import RunView, ci, lag_str, md_table
from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.run_dir.results_schema import KD

#: The mark of a Holm-adjusted interval in the tables.
DAGGER = "†"


def where(fam: Family) -> str:
    return f"on {fam.task} at domain {fam.domain} (teacher lag {lag_str(fam.lag)} days)"


def family_sentence(run: RunView) -> str:
    """The first paragraph's statement of the family: its size, level and slice."""
    fam = run.family
    if fam is None:
        return ""
    if not fam.size:
        return ("This run has no primary comparison (it has no two arms to compare), so it "
                "makes no verdict; every resolved comparison below is exploratory. ")
    level = f"{100 * fam.alpha:g} %"
    return (f"The primary family is {fam.size} comparison{'s' if fam.size > 1 else ''} "
            f"({fam.describe()}) {where(fam)}, adjusted together by Holm's step-down at "
            f"{level} family-wise (two-sided): a primary verdict holds only where Holm rejects, "
            f"and its interval ({DAGGER}) is at the level of the step that decided it; every "
            "other resolved comparison is exploratory, a lead for another run rather than a "
            "finding. ")


def _p(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "—"


def family_section(run: RunView) -> list[str]:
    """``## Primary comparisons``: each one's ΔNE difference, its 95 % interval and p-value,
    Holm's adjusted p-value, the adjusted interval at its level, and the verdict."""
    fam = run.family
    if fam is None or not fam.size:
        return []
    rows = [[f"{r.a} vs {r.b}", ci(r.diff, r.lo, r.hi), _p(r.p), str(r.rank), _p(r.holm_p),
             f"{100 * (1 - r.alpha):.2f} %", ci(r.diff, r.adj_lo, r.adj_hi), r.verdict]
            for r in fam.table.itertuples()]
    return [f"## Primary comparisons ({fam.task}, domain {fam.domain}, teacher lag "
            f"{lag_str(fam.lag)} days; Holm, {100 * fam.alpha:g} % family-wise)",
            "",
            "ΔNE(A) − ΔNE(B) = NE(B) − NE(A) for each comparison \"A vs B\" of the family, in "
            "the spec's order (`primary:` in spec.yaml; the default when it names none). Holm "
            "tests them from the smallest p-value up, the i-th of m at α / (m − i + 1), and "
            "stops at the first it cannot reject; each adjusted interval is at the level of "
            "the step that decided it (from the stop on, the stopping step's), so it excludes "
            "0 exactly where Holm rejects. These are the intervals (†) the tables show for "
            "these comparisons.", "",
            md_table(("comparison", "difference [95 % CI]", "p", "rank", "Holm p",
                      "adjusted level", "difference [adjusted CI]", "verdict"), rows), ""]


def headline(run: RunView) -> str:
    """The first "what it means" sentence: the primary family's resolved comparisons in the
    family's order (never the best of the variants), or that none is resolved."""
    fam = run.family
    assert fam is not None  # a run with intervals
    if not fam.size:
        return (f"This run has no primary comparison {where(fam)}: there is no transfer method "
                "to compare with the baseline or plain KD.")
    resolved = fam.resolved()
    if resolved.empty:
        return (f"None of the {fam.size} primary comparisons {where(fam)} is resolved after "
                f"Holm's adjustment ({fam.describe()}), so this run backs no difference "
                "between these methods.")
    phrases = "; ".join(_phrase(r) + (" (fragile)" if r.get("robustness") == "fragile" else "")
                        for _, r in resolved.iterrows())
    k = len(resolved)
    return (f"Of the {fam.size} primary comparisons {where(fam)}, {k} {'is' if k == 1 else 'are'}"
            f" resolved after Holm's adjustment: {phrases}.")


def _phrase(r: pd.Series) -> str:
    d = ci(r["diff"], r["adj_lo"], r["adj_hi"])
    neg = ci(-r["diff"], -r["adj_hi"], -r["adj_lo"])
    if r["verdict"] == GAIN:
        return f"{r['a']} is a real gain over the labels-only baseline, ΔNE {d}"
    if r["verdict"] == LOSS:
        return f"{r['a']} is a real loss against the labels-only baseline, ΔNE {d}"
    other = "plain KD" if r["b"] == KD else r["b"]
    if r["verdict"] == BEATS or r["verdict"].startswith("beats "):
        return f"{r['a']} beats {other} by {d}"
    assert r["verdict"] != UNRESOLVED
    return f"{r['a']} is below {other} by {neg}"


def robustness_sentence(run: RunView) -> list[str]:
    """The "what it means" sentence on robustness: how many primary verdicts held under
    perturbed numerics, which flipped; nothing without a repeat."""
    fam = run.family
    if not repeated(fam):
        return []
    assert fam is not None
    flips = fragile(fam)
    if flips.empty:
        return [f"All {fam.size} primary verdicts held when the search and final runs were "
                "repeated with every student's initial weights moved by one ulp (a stand-in "
                "for another CPU's rounding)."]
    named = ", ".join(f"{r.a} vs {r.b} ({r.verdict} here, {r.perturbed_verdict} there)"
                      for r in flips.itertuples())
    k = len(flips)
    return [f"{k} of {fam.size} primary verdicts {'is' if k == 1 else 'are'} fragile: repeated "
            "with every student's initial weights moved by one ulp (a stand-in for another "
            f"CPU's rounding), {named}; on another machine {'it' if k == 1 else 'each'} may "
            "read either way."]


def robustness_section(run: RunView) -> list[str]:
    """``## Verdict robustness``: each primary comparison's verdict here and in the repeat
    under perturbed numerics, with the repeat's adjusted interval; nothing without a
    repeat."""
    fam = run.family
    if not repeated(fam):
        return []
    assert fam is not None
    rows = [[f"{r.a} vs {r.b}", ci(r.diff, r.adj_lo, r.adj_hi), r.verdict,
             ci(r.perturbed_diff, r.perturbed_adj_lo, r.perturbed_adj_hi), r.perturbed_verdict,
             r.robustness] for r in fam.table.itertuples()]
    return ["## Verdict robustness", "",
            "The search and the final runs were repeated with every student's initial weights "
            f"moved by one unit in the last place (`{RunDir.PERTURBED}/`, spec key "
            "`robustness`): the difference another CPU's rounding makes, made on purpose, which "
            "training and the search amplify. A primary verdict that differs in the repeat is "
            "marked fragile: on another machine it may read either way. The repeat shares the "
            "teacher, its store and codes; another CPU perturbs those too.", "",
            md_table(("comparison", "difference [adjusted CI]", "verdict",
                      "repeat [adjusted CI]", "repeat's verdict", "robustness"), rows), ""]
