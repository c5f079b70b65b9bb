"""The spec's ``primary:`` section: the comparisons a run's headline and verdicts rest on
(DESIGN §6). The report adjusts them together by Holm's step-down at its 5 % level
(:mod:`gemkd.experiments.report.family`); every other resolved comparison is exploratory.
Naming them before the run is what keeps "the best of 30 comparisons" out of a headline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gemkd.experiments.spec.sections import as_mapping, quiet
from gemkd.transfer.errors import ConfigError

#: How a comparison is written: ``"A vs B"`` is ΔNE(A) − ΔNE(B) = NE(B) − NE(A).
VS = " vs "


def parse_comparison(text: Any, where: str) -> tuple[str, str]:
    """``"kd_aux vs kd"`` → ("kd_aux", "kd"); anything else is a ConfigError naming ``where``."""
    parts = text.split(VS) if isinstance(text, str) else []
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise ConfigError(f"{where}: expected a comparison 'A vs B' (two variant names, e.g. "
                          f"'kd_aux vs kd'), got {text!r}")
    a, b = (p.strip() for p in parts)
    if a == b:
        raise ConfigError(f"{where}: {text!r} compares a variant with itself (0 by "
                          "construction); name two different variants")
    return a, b


@dataclass
class PrimarySpec:
    """The report's primary family: ``comparisons`` (each ``"A vs B"``: ΔNE(A) − ΔNE(B) =
    NE(B) − NE(A)) on one slice, ``lag``, ``task`` and ``domain``. The report adjusts them
    together by Holm's step-down at its 5 % level (two-sided) and shows their adjusted
    intervals; every other resolved comparison is labelled exploratory, and the headline is a
    primary comparison. Left out: every variant against kd and kd against baseline (A/A twins
    excepted) at the first teacher lag, on the student's first task and its domain (``all``
    over several domains)."""

    #: comparisons "A vs B" of the spec's variants (A/A twins excluded); empty: every variant
    #: vs kd and kd vs baseline
    comparisons: list[str] = quiet(factory=list)
    #: the teacher lag of the family (null: the first of teacher_lag_days)
    lag: int | None = quiet()
    #: the task of the family (null: the first of student_tasks)
    task: str | None = quiet()
    #: the domain of the family (null: the student's domain; all when it has several)
    domain: str | None = quiet()

    @classmethod
    def from_mapping(cls, values: Any, where: str) -> PrimarySpec:
        from gemkd.transfer.config import build_dataclass

        obj = build_dataclass(cls, values if values is not None else {}, where)
        seen: dict[frozenset[str], str] = {}
        for i, text in enumerate(obj.comparisons):
            a, b = parse_comparison(text, f"{where}: key 'comparisons'[{i}]")
            key = frozenset((a, b))
            if key in seen:
                raise ConfigError(f"{where}: key 'comparisons' lists {a} and {b} twice "
                                  f"({seen[key]!r} and {text!r}); name each comparison once")
            seen[key] = text
        return obj

    def pairs(self) -> list[tuple[str, str]]:
        """The named comparisons as (A, B) pairs (empty: the default family)."""
        return [parse_comparison(c, "primary") for c in self.comparisons]

    def to_dict(self) -> dict[str, Any]:
        return as_mapping(self)

    def check(self, variants: dict[str, str | None], lags: list[int], tasks: list[str],
              student_domain: str | None) -> None:
        """Against the spec: ``variants`` maps each name to the variant it twins (None: not a
        twin). A ValueError names the key (the spec loader adds the file)."""
        for a, b in self.pairs():
            for name in (a, b):
                if name not in variants:
                    raise ValueError(f"'primary': comparison '{a} vs {b}' names {name!r}, not a "
                                     f"variant of the spec ({', '.join(variants)})")
                if variants[name] is not None:
                    raise ValueError(f"'primary': comparison '{a} vs {b}' names the A/A twin "
                                     f"{name!r}; twins are the run's own check of its false "
                                     "verdicts, never in the primary family")
        if self.lag is not None and self.lag not in lags:
            raise ValueError(f"'primary': lag {self.lag} is not one of teacher_lag_days {lags}")
        if self.task is not None and self.task not in tasks:
            raise ValueError(f"'primary': task {self.task!r} is not one of student_tasks "
                             f"{tasks}")
        if (self.domain is not None and student_domain is not None
                and self.domain not in (student_domain, "all")):
            raise ValueError(f"'primary': domain {self.domain!r}: the student serves "
                             f"{student_domain!r} only (student_domain)")
