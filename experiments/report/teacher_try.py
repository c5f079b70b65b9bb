"""What to try when the teacher is not better than the labels-only student: only what the run did
not already do, read from the run as it ran (``teacher_fit.json``, else the cached fits, and
``spec.yaml``).

A new user's report suggested a validation day with ``select: best`` and one epoch, both
already in effect (epoch 1 of 2 kept on the validation day), then a smaller teacher config,
which fails before training while the spec's ``hierarchical.overrides.init_from: gem`` starts the
domain FM from GEM's weights of another build, unless ``hierarchical.config`` changes with it. So
the sentence says what is in effect, suggests the rest, and names that coupling."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gemkd.experiments.report.summary import RunView, lag_str
from gemkd.experiments.teacher.teacher_config import EXPERIMENTS, TEACHER_CONFIGS, find_config
from gemkd.transfer.errors import ConfigError

#: The model keys that size a teacher config (a shipped GEM's width and depth).
SIZE_KEYS = ("d", "n_layers", "mlp_width", "trunk_dim")


@dataclass(frozen=True)
class FitAsRun:
    """One teacher fit of the main lag as it ran: its validation days (None: none), how it
    chose its epoch, the most epochs it could train and the epoch it kept (None: unknown)."""

    val_days: list[int] | None
    select: str
    max_epochs: int
    kept: int | None


def fits_as_run(run: RunView, cached: Sequence[Any] = ()) -> list[FitAsRun]:
    """The main lag's fits from ``teacher_fit.json``, else ``cached``, the fits read from the
    run's cache (an older run; ``teacher_diag.fits_of_lag``, which imports this module; its most
    epochs are the epochs it trained)."""
    out = []
    for entries in run.run_dir.teacher_fit().values():
        e = entries.get(lag_str(run.lag)) or entries.get(str(run.lag))
        if isinstance(e, dict):
            out.append(FitAsRun(e.get("val_days") or None, str(e.get("select") or "last"),
                                int(e.get("max_epochs") or e.get("epochs_trained") or 1),
                                e.get("chosen_epoch")))
    if out:
        return out
    return [FitAsRun(f.val_days or None, f.select, max(f.epochs, 1),
                     f.best_epoch if f.select == "best" and f.best_epoch else f.epochs or None)
            for f in cached]


def try_sentence(run: RunView, cached: Sequence[Any] = ()) -> str:
    """The section's "What to try" line: what is already in effect, then what is not
    (``cached``: the run's cached fits, for a run before ``teacher_fit.json``)."""
    spec = run.spec or {}
    found = spec.get("teacher")
    teacher: dict[str, Any] = found if isinstance(found, dict) else {}
    if teacher.get("store"):
        return ("What to try: the teacher is an imported store (`teacher.store`), so a better "
                "one is made outside this run; or train one here (leave `store` out).")
    fits = fits_as_run(run, cached)
    validated = bool(fits) and all(f.val_days and f.select == "best" for f in fits)
    several = not fits or any(f.max_epochs > 1 for f in fits)  # epochs to choose from
    in_effect, tries = [], []
    if validated:
        kept = sorted({f"{f.kept} of {f.max_epochs}" for f in fits if f.kept is not None})
        in_effect.append("a validation day with `select: best`"
                         + (f" (epoch {', '.join(kept)} kept)" if kept else ""))
    elif several:
        tries.append("a validation day with early stopping (`teacher_val_days: 1` in the spec, "
                     "with `select: best` and `patience: 1` in `teacher.overrides`)")
    if not several:
        in_effect.append("one epoch")
    elif not validated:
        tries.append("one epoch (`teacher: {overrides: {max_epochs: 1}}`: a second pass over "
                     "the same days can memorise ids)")
    config = str(teacher.get("config") or "small")
    smaller = smaller_config(config, run.dir)
    if smaller is not None:
        text = f"a smaller teacher config (`teacher: {{config: {smaller}}}`"
        if _fm_from_gem(spec):
            text += (f"; with this spec's `hierarchical.overrides.init_from: gem` set "
                     f"`hierarchical: {{config: {smaller}}}` too, as the domain FM starts from "
                     "GEM's weights and must be built alike, or leave init_from out")
        tries.append(text + ")")
    head = f"Already in effect: {' and '.join(in_effect)}. " if in_effect else ""
    if not tries:
        return (head + f"What to try: no shipped teacher config is smaller than {config!r}; "
                "what is left is the teacher's data (a longer `teacher_days` window) or a "
                "config of your own (a YAML path in `teacher.config`).")
    listed = ", ".join(tries[:-1]) + (", or " if len(tries) > 1 else "") + tries[-1]
    return (head + f"What to try: {listed}; then rerun (the students are retrained against "
            "the new teacher).")


def _fm_from_gem(spec: dict[str, Any]) -> bool:
    """Does a variant of this run learn from a domain FM started from GEM's weights?"""
    fm = spec.get("hierarchical")
    overrides = fm.get("overrides") if isinstance(fm, dict) else None
    if not isinstance(overrides, dict) or overrides.get("init_from") != "gem":
        return False
    variants = spec.get("variants")
    if isinstance(variants, dict):
        return any(isinstance(v, dict) and v.get("teacher") == "domain_fm"
                   for v in variants.values())
    return "hierarchical" in (variants or [])


def _size(path: Any) -> tuple[str, dict[str, float]] | None:
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    model = raw.get("model") if isinstance(raw, dict) else None
    if not isinstance(model, dict):
        return None
    return str(raw.get("class_path")), {k: float(model[k]) for k in SIZE_KEYS
                                        if isinstance(model.get(k), int | float)}


def smaller_config(config: str, base: Any = None) -> str | None:
    """The largest shipped teacher config (experiments/teacher/configs) of the same class that is
    no larger than ``config`` in every sizing key (:data:`SIZE_KEYS`) and smaller in one; None
    if none is (``tiny``) or ``config`` cannot be read."""
    try:
        here = _size(find_config(config, TEACHER_CONFIGS, base))
    except ConfigError:
        return None
    if here is None or not here[1]:
        return None
    cls, size = here
    found = []
    for path in sorted((EXPERIMENTS / TEACHER_CONFIGS).glob("*.yaml")):
        other = _size(path)
        if other is None or other[0] != cls or set(other[1]) != set(size):
            continue
        o = other[1]
        if all(o[k] <= size[k] for k in size) and any(o[k] < size[k] for k in size):
            found.append((-sum(o.values()), path.stem))  # the largest; a tie by name
    return min(found)[1] if found else None
