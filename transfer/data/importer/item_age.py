"""The item-age check of sampled negatives: do positives and negatives sit on items of the same
age? On a clicks-only log of fresh items (news), negatives drawn from old items let a model tell
clicks from negatives by the item's novelty alone, a shortcut logged impressions would not
reward. The import measures the shares (``negatives.item_age`` in ``schema.json``, copied into a
run's ``sampled_negatives.json``); :func:`item_age_caveat` words the gap for notes and reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MIN_POINTS = 0.01  # the shares differ by at least one percentage point ...
MIN_RATIO = 1.5    # ... and one is at least 1.5 times the other


def item_age_caveat(negatives: Mapping[str, Any] | None) -> str:
    """A sentence when positives and sampled negatives differ in item age, else "".

    ``negatives``: a dataset's ``schema.negatives`` (or a run's ``sampled_negatives.json``);
    one written before the check (no ``item_age``) or a log without negatives gives "".
    """
    age = (negatives or {}).get("item_age")
    if not age:
        return ""
    p, q, hours = float(age["positives"]), float(age["negatives"]), float(age["hours"])
    if abs(p - q) < MIN_POINTS or max(p, q) < MIN_RATIO * min(p, q):
        return ""
    what = "novelty" if p > q else "novelty (here: its age)"
    return (f"{percent(p)} of positives but {percent(q)} of sampled negatives are on items "
            f"first logged under {hours:g} h before their row, so a model can tell them apart "
            f"by the item's {what} alone, which logged impressions would not reward; sampling "
            "from items available nearer the row's time (a shorter negatives.window_hours, a "
            "longer negatives.lookahead_hours) narrows the gap")


def percent(x: float) -> str:
    """A share in per cent: one decimal, two under 1 %."""
    return f"{100 * x:.1f} %" if 100 * x >= 1 or x == 0 else f"{100 * x:.2f} %"
