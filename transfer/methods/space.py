"""Knob ranges: what a transfer method's ``tunable`` declares and the search explores (DESIGN §6
"Fair comparison").

A method declares each knob as a range — :class:`LogUniform` for weights and scales,
:class:`Uniform` for mixing coefficients, :class:`IntRange` for widths, :class:`Categorical` for
choices — with a ``default`` (the search's first trial) and, where a bound is a true limit of the
parameter (KD's α ∈ [0, 1]), ``natural_low`` / ``natural_high``: a choice at a natural bound is
an answer, a choice at any other bound says the range was too narrow (:meth:`Range.edge`). A
plain list is accepted as a :class:`Categorical`.

``alternative_to`` declares a knob tuned *instead of* another one, only when the spec names it
(in ``tuning:`` or a variant's ``init_args``): KD's ``kd_weight`` λ replaces its ``alpha``.

:func:`method_space` and :func:`variant_space` turn the declarations and the spec's ``tuning:``
overrides (a list, or ``{low, high, log, int}``) into one space per variant, with every error a
``ConfigError`` naming the knob.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from gemkd.transfer.errors import ConfigError

EDGE_TOLERANCE = 0.05  # a choice within 5 % of a bound (in the range's own scale) is at it


@dataclass(frozen=True, kw_only=True, repr=False)
class Range:
    """Base of every knob declaration (see the module docstring)."""

    default: Any = None
    natural_low: bool = False
    natural_high: bool = False
    alternative_to: str | None = None

    def contains(self, value: Any) -> bool:
        raise NotImplementedError

    def probe_values(self) -> list[Any]:
        """The values a method's constructor must accept (the bounds, the default, every
        choice): checked before a run starts, so a bad range fails up front."""
        raise NotImplementedError

    def center(self) -> Any:
        """The default, else the middle of the range: the search's first trial, and the value
        the other knobs' constructor probes are built with."""
        raise NotImplementedError

    def edge(self, value: Any, tolerance: float = EDGE_TOLERANCE) -> str | None:
        """``"low"`` / ``"high"`` when ``value`` sits within ``tolerance`` of a bound that is
        not natural, else None."""
        raise NotImplementedError

    def _check_default(self) -> None:
        if self.default is not None and not self.contains(self.default):
            raise ValueError(f"default {self.default!r} is outside {self.describe()}")

    def describe(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        extra = [f"default={self.default!r}"] + [
            f"{k}={v!r}" for k, v in (("natural_low", self.natural_low),
                                      ("natural_high", self.natural_high),
                                      ("alternative_to", self.alternative_to)) if v]
        return f"{self.describe()[:-1]}, {', '.join(extra)})"


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


class _Numeric(Range):
    """What the numeric ranges share; ``low``, ``high``, ``log`` come from the subclass."""

    low: Any
    high: Any
    log: bool
    integer: ClassVar[bool] = False

    def __post_init__(self) -> None:
        low, high = _number(self.low, "low"), _number(self.high, "high")
        if not low < high:
            raise ValueError(f"low must be < high, got [{low}, {high}] (a fixed value is a "
                             "one-item list)")
        if self.log and low <= 0:
            raise ValueError(f"a log range needs low > 0, got {low}")
        if self.integer and (int(low) != low or int(high) != high):
            raise ValueError(f"an integer range needs integer bounds, got [{low}, {high}]")
        self._check_default()

    def _scale(self, v: float) -> float:
        return math.log(v) if self.log else float(v)

    def contains(self, value: Any) -> bool:
        if not _is_number(value) or (self.integer and int(value) != value):
            return False
        return self.low <= value <= self.high

    def probe_values(self) -> list[Any]:
        values = [self.low, self.high] + ([self.default] if self.default is not None else [])
        return [int(v) for v in values] if self.integer else values

    def center(self) -> Any:
        if self.default is not None:
            return self.default
        mid = math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2
        return round(mid) if self.integer else mid

    def edge(self, value: Any, tolerance: float = EDGE_TOLERANCE) -> str | None:
        lo, hi = self._scale(self.low), self._scale(self.high)
        position = (self._scale(value) - lo) / (hi - lo)
        if position <= tolerance and not self.natural_low:
            return "low"
        if position >= 1 - tolerance and not self.natural_high:
            return "high"
        return None

    def describe(self) -> str:
        return f"{type(self).__name__}({self.low}, {self.high})"


@dataclass(frozen=True, repr=False)
class Uniform(_Numeric):
    """A float drawn uniformly from ``[low, high]``: mixing coefficients."""

    low: float
    high: float
    log = False  # a class attribute, not a field (IntRange's log is one)


@dataclass(frozen=True, repr=False)
class LogUniform(_Numeric):
    """A float drawn uniformly in log from ``[low, high]`` (``low > 0``): weights and scales,
    whose effect is multiplicative."""

    low: float
    high: float
    log = True  # a class attribute, not a field


@dataclass(frozen=True, repr=False)
class IntRange(_Numeric):
    """An integer in ``[low, high]``, uniform or (``log=True``) uniform in log: widths."""

    low: int
    high: int
    log: bool = False
    integer: ClassVar[bool] = True

    def describe(self) -> str:
        return f"IntRange({self.low}, {self.high}{', log=True' if self.log else ''})"


@dataclass(frozen=True, repr=False)
class Categorical(Range):
    """A choice among ``values`` (YAML values; the search treats them as unordered; default:
    the first). When they are all numbers, the smallest and largest are its bounds for
    :meth:`edge`: a choice at the end of a list of numbers is at the edge of what was tried."""

    values: Sequence[Any]

    def __post_init__(self) -> None:
        values = self.values
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"expected a non-empty list of values, got {values!r}")
        values = tuple(values)
        for i, v in enumerate(values):
            if any(_same(v, w) for w in values[:i]):
                raise ValueError(f"lists {v!r} twice")
        object.__setattr__(self, "values", values)
        if self.default is None:
            object.__setattr__(self, "default", values[0])
        self._check_default()

    def contains(self, value: Any) -> bool:
        return any(_same(value, v) for v in self.values)

    def numeric(self) -> bool:
        return all(_is_number(v) for v in self.values)

    def probe_values(self) -> list[Any]:
        return list(self.values)

    def center(self) -> Any:
        return self.default

    def edge(self, value: Any, tolerance: float = EDGE_TOLERANCE) -> str | None:
        if not self.numeric() or len(self.values) < 2:
            return None
        if value == min(self.values) and not self.natural_low:
            return "low"
        if value == max(self.values) and not self.natural_high:
            return "high"
        return None

    def describe(self) -> str:
        return f"Categorical({list(self.values)})"


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same kind (``True`` is not ``1``, ``1`` is ``1.0``)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def as_range(declared: Range | Sequence[Any]) -> Range:
    """A declaration as a :class:`Range`: a plain list is a :class:`Categorical`."""
    if isinstance(declared, Range):
        return declared
    if isinstance(declared, list | tuple):
        return Categorical(declared)
    raise TypeError(f"expected a Range or a list of values, got {declared!r}")


def _natural(declared: Range) -> tuple[float | None, float | None]:
    """The declaration's natural bounds as values (None: that bound is not natural)."""
    if isinstance(declared, _Numeric):
        low, high = declared.low, declared.high
    elif isinstance(declared, Categorical) and declared.numeric():
        low, high = min(declared.values), max(declared.values)
    else:
        return None, None
    return (low if declared.natural_low else None), (high if declared.natural_high else None)


def resolve(declared: Range, override: Any) -> Range:
    """The range the search explores: ``declared``, or the spec's ``override`` of it (a list:
    a :class:`Categorical`; ``{low, high, log, int}``: a numeric range whose ``log`` and ``int``
    default to the declaration's). A bound is natural where it equals a natural bound of the
    declaration; the default is kept where the new range contains it. Raises ``ValueError``."""
    if override is None:
        return declared
    nat_low, nat_high = _natural(declared)
    if isinstance(override, list | tuple):
        values = list(override)
        numeric = bool(values) and all(_is_number(v) for v in values)
        keep = any(_same(declared.default, v) for v in values)
        return Categorical(values, default=declared.default if keep else None,
                           natural_low=numeric and min(values) == nat_low,
                           natural_high=numeric and max(values) == nat_high)
    if not isinstance(override, Mapping) or not {"low", "high"} <= set(override) \
            or not set(override) <= {"low", "high", "log", "int"}:
        raise ValueError(f"expected a list of values or {{low, high, log, int}}, got {override!r}")
    if isinstance(declared, Categorical) and not declared.numeric():
        raise ValueError(f"it is a choice among {list(declared.values)}: give a list")
    log = bool(override.get("log", getattr(declared, "log", False)))
    integer = bool(override.get("int", getattr(declared, "integer", False)))
    low, high = override["low"], override["high"]
    flags = dict(natural_low=low == nat_low, natural_high=high == nat_high)
    rng: _Numeric = (IntRange(low, high, log=log, **flags) if integer
                     else (LogUniform if log else Uniform)(low, high, **flags))
    return replace(rng, default=declared.default) if rng.contains(declared.default) else rng


def method_space(method: str, tunable: Mapping[str, Range | Sequence[Any]],
                 fixed: Collection[str], overrides: Mapping[str, Any]) -> dict[str, Range]:
    """One method's tuned knobs: its declarations less those ``fixed`` (its ``init_args``),
    each replaced by the spec's override if any. A knob ``alternative_to`` another is tuned in
    its place only when the spec names it (``overrides``) and neither is fixed; fixing an
    alternative (``init_args: {kd_weight: 2}``) also stops its primary being tuned."""
    decls: dict[str, Range] = {}
    for knob, declared in tunable.items():
        try:
            decls[knob] = as_range(declared)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"method {method!r} declares knob {knob!r}: {e}") from None
    replaced: dict[str, str] = {}
    for knob, rng in decls.items():
        primary = rng.alternative_to
        if primary is None:
            continue
        if primary not in decls or decls[primary].alternative_to is not None:
            raise ConfigError(f"method {method!r}: knob {knob!r} is an alternative to "
                              f"{primary!r}, which it does not declare as a knob of its own")
        if knob in fixed or (knob in overrides and primary not in fixed):
            if primary in replaced:
                raise ConfigError(f"method {method!r}: {replaced[primary]!r} and {knob!r} "
                                  f"both replace {primary!r}: name one of them")
            replaced[primary] = knob
    space: dict[str, Range] = {}
    for knob, rng in decls.items():
        if knob in fixed or knob in replaced:
            continue
        if rng.alternative_to is not None and replaced.get(rng.alternative_to) != knob:
            continue
        if rng.alternative_to is not None and rng.alternative_to in overrides:
            raise ConfigError(f"spec tuning names both {rng.alternative_to!r} and {knob!r}: "
                              f"method {method!r} takes one or the other")
        try:
            space[knob] = resolve(rng, overrides.get(knob))
        except ValueError as e:
            raise ConfigError(f"spec tuning: knob {knob!r} (method {method!r}, declared "
                              f"{rng.describe()}): {e}") from None
    return space


def variant_space(variant: str, methods: Sequence[tuple[str, Mapping, Collection[str]]],
                  overrides: Mapping[str, Any]) -> dict[str, Range]:
    """The variant's space from ``(method name, tunable, fixed knobs)`` per method, knobs
    sorted (a stable order). Two methods tuning the same knob is an error."""
    space: dict[str, Range] = {}
    owner: dict[str, str] = {}
    for name, tunable, fixed in methods:
        for knob, rng in method_space(name, tunable, fixed, overrides).items():
            if knob in owner:
                raise ConfigError(f"variant {variant!r}: methods {owner[knob]!r} and {name!r} "
                                  f"both tune {knob!r}")
            owner[knob] = name
            space[knob] = rng
    return dict(sorted(space.items()))


def space_signature(space: Mapping[str, Range]) -> str:
    """A stable text of a space (to refuse resuming a search over another one)."""
    return "; ".join(f"{k}={r.describe()} natural=({r.natural_low},{r.natural_high}) "
                     f"default={r.default!r}" for k, r in sorted(space.items()))
