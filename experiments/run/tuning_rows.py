"""The rows of ``tuning.csv``: every trial of every search, one row per knob (DESIGN §6 "Fair
comparison"), so the report can show what was tried, what was chosen and which choice sits at
the edge of its range."""

from __future__ import annotations

from typing import Any

from gemkd.experiments.run.search import Search

TUNING_COLUMNS = ("variant", "teacher_lag_days", "world", "draw", "trial", "param", "value",
                  "val_ne", "chosen", "at_edge")


def tuning_rows(search: Search, variant: str, lag: int, world: int | None = None,
                draw: int | None = None) -> list[dict[str, Any]]:
    """One row per (finished trial, knob) of ``search``: ``draw`` the final seed whose search it
    is (empty: one search for every seed, ``tuning.draws: shared``), ``val_ne`` its score (NaN:
    failed), ``chosen`` on the chosen trial's rows (the earliest of equal scores), ``at_edge``
    ``low``/``high`` on a chosen row whose value is at a non-natural bound of its range, else
    empty. A search without knobs (the labels-only baseline, ``draws: shared``) has no rows."""
    history = search.history()
    if not search.space or not history:
        return []
    try:
        chosen = search.best_trial().number
        edges = search.at_edge()
    except LookupError:  # every trial failed
        chosen, edges = None, {}
    rows = []
    for record in history:
        for param, value in record.params.items():
            is_chosen = record.number == chosen
            rows.append({"variant": variant, "teacher_lag_days": lag, "world": world,
                         "draw": draw, "trial": record.number, "param": param, "value": value,
                         "val_ne": record.value, "chosen": is_chosen,
                         "at_edge": edges.get(param, "") if is_chosen else ""})
    return rows
