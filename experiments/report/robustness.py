"""Whether each primary verdict survives perturbed numerics (DESIGN §6, verdict robustness).

A run is deterministic on one machine; another CPU rounds its sums differently, and training
and the search amplify a last-bit difference into other knobs and other numbers, enough to move
a verdict that sits near the line. A run with ``robustness: {perturb: ulp}`` repeats its search
and final runs with every student's initial weights moved by one ulp, into ``RUN_DIR/perturbed``
(:mod:`gemkd.experiments.run.perturbed`); here the repeat's primary family is computed as the
main one is, and each primary comparison whose verdict differs there is *fragile*: the tables
say "(primary, Holm, fragile)", the first paragraph and the headline say so, and a section lists
both verdicts. Without the repeat nothing is marked (and nothing is claimed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from gemkd.experiments.report.intervals import UNRESOLVED
from gemkd.experiments.run_dir import RunDir
from gemkd.transfer.errors import ConfigError

if TYPE_CHECKING:
    from gemkd.experiments.report.family import Family

FRAGILE, HOLDS = "fragile", "holds"
#: What :func:`mark` adds to the family's table: the repeat's verdict, its adjusted interval
#: and whether the main verdict held there.
COLUMNS = ["perturbed_verdict", "perturbed_diff", "perturbed_adj_lo", "perturbed_adj_hi",
           "robustness"]


def mark(family: Family | None, other: Family | None) -> Family | None:
    """``family`` with :data:`COLUMNS` read from ``other`` (the repeat's family): ``robustness``
    is ``fragile`` where the two verdicts of a comparison differ — resolved in one and not in
    the other, or resolved the other way — and ``holds`` where they agree; empty (and nothing
    claimed) without a repeat. A repeat that lacks a comparison of the main family does not
    read as agreement: a ConfigError names it."""
    if family is None:
        return None
    table = family.table.copy()
    if other is None or table.empty:
        for col in COLUMNS:
            table[col] = "" if col in ("perturbed_verdict", "robustness") else float("nan")
        return _replace(family, table)
    theirs = other.table.set_index(["a", "b"])
    rows = []
    for r in table.itertuples():
        if (r.a, r.b) not in theirs.index:
            raise ConfigError(f"{RunDir.PERTURBED}/: the repeat under perturbed numerics has no "
                              f"primary comparison '{r.a} vs {r.b}': rerun gemkd run to finish "
                              "it")
        t = theirs.loc[(r.a, r.b)]
        rows.append({"perturbed_verdict": t["verdict"], "perturbed_diff": t["diff"],
                     "perturbed_adj_lo": t["adj_lo"], "perturbed_adj_hi": t["adj_hi"],
                     "robustness": HOLDS if t["verdict"] == r.verdict else FRAGILE})
    extra = pd.DataFrame(rows, columns=COLUMNS, index=table.index)
    return _replace(family, pd.concat([table, extra], axis=1))


def _replace(family: Family, table: pd.DataFrame) -> Family:
    from dataclasses import replace

    return replace(family, table=table)


def fragile(family: Family | None) -> pd.DataFrame:
    """The family's fragile comparisons (none without a repeat)."""
    if family is None or "robustness" not in family.table:
        return pd.DataFrame(columns=COLUMNS)
    return family.table[family.table["robustness"] == FRAGILE]


def is_fragile(family: Family | None, a: str, b: str) -> bool:
    f = fragile(family)
    return bool(((f["a"] == a) & (f["b"] == b)).any()) if not f.empty else False


def suffix(family: Family | None, a: str, b: str) -> str:
    """``" (fragile)"`` after a verdict of comparison ``a vs b`` that flips, else nothing."""
    return f" ({FRAGILE})" if is_fragile(family, a, b) else ""


def repeated(family: Family | None) -> bool:
    """Did the run repeat its primary family under perturbed numerics?"""
    return family is not None and "robustness" in family.table and \
        bool((family.table["robustness"] != "").any())


def unresolved_fragile(family: Family | None) -> list[str]:
    """``a vs b`` of the comparisons not resolved here that the repeat resolved."""
    f = fragile(family)
    return [f"{r.a} vs {r.b}" for r in f.itertuples() if r.verdict == UNRESOLVED]
