"""A run's "day": a calendar day, or one of a bucketed dataset's equal-count time buckets.

A log imported with ``days: {buckets: N}`` has N buckets of equal row counts for days, each
possibly months long; its report said "teacher lag 0 days" and "learnt from 8 days [0, 8)", which
reads as a week. So a report of a bucketed dataset says "bucket" wherever it said "day" (outside
code spans: a spec key such as ``teacher_val_days`` keeps its name) and opens with one sentence
on what a bucket is.

The unit is read from the run's dataset's ``schema.json``: its ``day_unit`` (``"day"`` or
``"bucket"``; absent = ``"day"``), else, for a dataset imported before that field, the import
mapping it records (``generator.mapping.days.buckets``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gemkd.experiments.run_dir import RunDir

DAY, BUCKET = "day", "bucket"
_CODE = re.compile(r"(`[^`\n]*`)")
_DAY = re.compile(r"\b([Dd])ay(s?)\b")


def dataset_schema(run_dir: RunDir, spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The raw ``schema.json`` of the run's dataset: ``data.src`` for a dataset used in place
    (a local directory), else the run's cached data step's; None where neither is readable
    (a cleaned cache, a remote dataset)."""
    data = (spec or {}).get("data")
    candidates: list[Path] = []
    if isinstance(data, dict) and data.get("source") == "dataset" and \
            isinstance(data.get("src"), str) and "://" not in data["src"]:
        candidates.append(Path(data["src"]) / "schema.json")
    candidates += [step / "data" / "schema.json" for step in run_dir.steps("data")]
    for path in candidates:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(raw, dict):
            return raw
    return None


def day_unit(schema: dict[str, Any] | None) -> str:
    """``"bucket"`` for a bucketed dataset, else ``"day"`` (unknown: a day, as before)."""
    if not schema:
        return DAY
    unit = schema.get("day_unit")
    if unit in (DAY, BUCKET):
        return str(unit)
    return BUCKET if buckets_of(schema) is not None else DAY


def buckets_of(schema: dict[str, Any]) -> int | None:
    """N of an import mapping's ``days: {buckets: N}`` recorded in the schema, else None."""
    generator = schema.get("generator")
    mapping = generator.get("mapping") if isinstance(generator, dict) else None
    days = mapping.get("days") if isinstance(mapping, dict) else None
    n = days.get("buckets") if isinstance(days, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def window_text(schema: dict[str, Any] | None, first: int, end: int) -> str:
    """The half-open window ``[first, end)`` in the dataset's unit, with its dates where the
    schema records them (``generator.day_dates``): ``buckets [15, 18) (2018-07-02 to
    2020-01-01)``; a bucket may span months, so its number alone says little."""
    text = f"{day_unit(schema)}s [{first}, {end})"
    generator = (schema or {}).get("generator")
    dates = generator.get("day_dates") if isinstance(generator, dict) else None
    if isinstance(dates, dict):
        lo, hi = dates.get(str(first)), dates.get(str(end - 1))
        if isinstance(lo, list) and isinstance(hi, list) and lo and hi:
            text += f" ({lo[0]} to {hi[-1]})"
    return text


def in_units(text: str, unit: str, keep: tuple[str, ...] = ()) -> str:
    """``text`` with day/days/Day/Days as ``unit`` outside backtick code spans and outside the
    names in ``keep`` (a run's or dataset's own name may hold the word)."""
    if unit == DAY:
        return text
    names = "".join(f"|{re.escape(k)}" for k in sorted(keep, key=len, reverse=True)
                    if k and not _DAY.fullmatch(k))  # a name that is the word itself is not
    parts = re.split(f"(`[^`\n]*`{names})", text) if names else _CODE.split(text)
    for i in range(0, len(parts), 2):  # the even parts lie outside code spans
        parts[i] = _DAY.sub(lambda m: ("B" if m[1] == "D" else "b") + unit[1:] + m[2], parts[i])
    return "".join(parts)


def unit_note(schema: dict[str, Any] | None) -> str:
    """The sentence a bucketed dataset's report opens with (empty for calendar days)."""
    if day_unit(schema) != BUCKET:
        return ""
    n = len(schema.get("days") or []) if schema else 0
    how = (f"`days: {{buckets: {buckets_of(schema)}}}`" if schema and buckets_of(schema)
           else "its `day_unit: bucket`")
    return (f"**Buckets, not days:** this dataset's time unit is {n or 'its'} equal-count time "
            f"buckets ({how}): every \"bucket\" below (a teacher lag, a window, the evaluation) "
            "is one of them, however long a stretch of time it spans.")


def report_unit(run_dir: RunDir, spec: dict[str, Any] | None) -> tuple[str, str]:
    """(unit, note) of a run's report."""
    schema = dataset_schema(run_dir, spec)
    return day_unit(schema), unit_note(schema)


def text_in_units(run_dir: RunDir, spec: dict[str, Any] | None, text: str,
                  after: int, keep: tuple[str, ...] = ()) -> str:
    """A report's Markdown ``text`` in the run's unit (``keep``: names left as they are), the
    unit's note (if any) as a paragraph after paragraph ``after`` (0-based; the first paragraph
    stays the answer)."""
    return "\n".join(lines_in_units(run_dir, spec, text.split("\n"), _line_of(text, after),
                                    keep))


def lines_in_units(run_dir: RunDir, spec: dict[str, Any] | None, lines: list[str],
                   at: int, keep: tuple[str, ...] = ()) -> list[str]:
    """Markdown ``lines`` in the run's unit (``keep``: names left as they are), the unit's note
    (if any) inserted at line ``at`` as a paragraph of its own."""
    unit, note = report_unit(run_dir, spec)
    out = [in_units(line, unit, keep) for line in lines]
    return out[:at] + [note, ""] + out[at:] if note else out


def _line_of(text: str, paragraph: int) -> int:
    """The line index just past paragraph ``paragraph``'s blank line."""
    seen, lines = 0, text.split("\n")
    for i, line in enumerate(lines):
        if not line.strip() and i > 0 and lines[i - 1].strip():
            if seen == paragraph:
                return i + 1
            seen += 1
    return len(lines)
