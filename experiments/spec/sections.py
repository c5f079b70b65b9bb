"""The spec's sections (DESIGN §6.1): ``data:``, ``teacher:`` / ``hierarchical:``, plug-ins
(``class_path`` + ``init_args``), ``tuning:``, ``bootstrap:``, ``robustness:``, ``repr:``,
``solaris:`` — each a
dataclass with its rules beside its fields (:mod:`gemkd.transfer.constraints`), built from YAML by
:func:`gemkd.transfer.config.build_dataclass`."""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from typing import Annotated, Any, Literal

from gemkd.transfer.constraints import (
    at_least,
    check_fields,
    int_at_least,
    unique,
)
from gemkd.transfer.options import (
    Sampler,
    TuningDraws,
)

#: field metadata: the key is left out of the section's YAML mapping (``to_dict``) while at its
#: default, so a spec.yaml, and the run tags hashed from it, read as before the key existed
QUIET = {"quiet": True}


def quiet(default: Any = None, factory: Any = None, takes: str | None = None) -> Any:
    """A field left out of :func:`as_mapping` at its default (:data:`QUIET`); ``takes``: the
    field is a mapping of keys the section does not declare (what they are, for the error of a
    key that belongs there: :func:`gemkd.transfer.config.unknown_key`)."""
    metadata = {**QUIET, **({"open": takes} if takes else {})}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _default(f: Field) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING


def yaml_value(value: Any) -> Any:
    """A spec value as YAML writes it: a section as its mapping (its ``to_dict``), lists and
    mappings copied."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if is_dataclass(value) and not isinstance(value, type):
        return as_mapping(value)
    if isinstance(value, list | tuple):
        return [yaml_value(v) for v in value]
    if isinstance(value, dict):
        return {k: yaml_value(v) for k, v in value.items()}
    return value


def as_mapping(obj: Any) -> dict[str, Any]:
    """A section (a dataclass) as its YAML mapping, read from its fields in their order; a
    :data:`QUIET` field at its default is left out."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.metadata.get("quiet") and value == _default(f):
            continue
        out[f.name] = yaml_value(value)
    return out


_WORLDS = unique("key 'seeds' must list at least one world seed, each once, got {value}")


@dataclass
class DataSpec:
    """``source`` synthetic | movielens | kuairand | import; ``preset`` (synthetic: a name in
    experiments/data or a YAML path); ``src`` (real data: the source directory or file);
    ``seeds`` (synthetic: the world seeds the experiment is replicated over, one world each;
    unset: the preset's one world); ``overrides``: keys of the source's own config (e.g.
    ``examples_per_day``)."""

    #: synthetic, movielens, kuairand, import (a log and its ``mapping``) or dataset (a gemkd
    #: dataset made before: a directory or s3:// URI, read in place)
    source: str = "synthetic"
    #: synthetic: the world's config, a name in experiments/data or a YAML path
    preset: str | None = quiet()
    #: real data: the source directory or file (dataset: the dataset itself)
    src: str | None = quiet()
    #: synthetic: the worlds the experiment is replicated over, one seed each (each its own
    #: data, teachers and students; a verdict must hold in most); null: the preset's one world
    seeds: Annotated[list[int], _WORLDS] | None = quiet()
    #: keys of the source's own config it overrides (e.g. seed, examples_per_day; an import's
    #: mapping; movielens n_days; kuairand tasks)
    overrides: dict[str, Any] = quiet(factory=dict, takes="a key of the source's own config")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.seeds is not None:
            if self.source != "synthetic":
                raise ValueError(f"key 'seeds' replicates the synthetic world; source "
                                 f"{self.source} is one dataset (replicate real data over "
                                 "datasets: gemkd report --markdown RUN_DIR...)")
            if "seed" in self.overrides:
                raise ValueError("give the world's seed as 'overrides.seed' or its "
                                 "replicates as 'seeds', not both")

    def to_dict(self) -> dict[str, Any]:
        return as_mapping(self)


@dataclass
class TeacherSpec:
    """``config`` a teacher config (a name in experiments/teacher/configs or a YAML path); ``store``
    a verified teacher-output store to use instead of training one (``gemkd store import``);
    ``overrides``: keys of the teacher config (e.g. ``max_seq_len``)."""

    #: a teacher config: a name in experiments/teacher/configs or a path to a teacher config YAML
    config: str = "small"
    #: a verified teacher-output store (directory or s3:// URI) used instead of training a
    #: teacher (gemkd store import)
    store: str | None = quiet()
    #: keys of the teacher config it overrides (e.g. max_seq_len, max_epochs, init_from; the
    #: days are set by the protocol)
    overrides: dict[str, Any] = quiet(factory=dict, takes="a key of the teacher config")

    def to_dict(self) -> dict[str, Any]:
        return as_mapping(self)


@dataclass
class PluginSpec:
    """``class_path`` (a built-in name or a dotted import path) and its ``init_args``."""

    #: a built-in name or the dotted import path of your own class
    class_path: str
    #: keyword arguments of its constructor
    init_args: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, values: Any, where: str) -> PluginSpec:
        from gemkd.transfer.plugins import parse_plugin

        return cls(*parse_plugin(values, where, {}))

    def to_dict(self) -> Any:
        return {"class_path": self.class_path, "init_args": dict(self.init_args)} \
            if self.init_args else self.class_path

_TRIALS = at_least(1, "keys 'trials' and 'seeds' must be >= 1")


@dataclass
class TuningSpec:
    """The equal-budget search of every variant's knobs (DESIGN §6): ``sampler`` (Optuna's
    ``tpe``, ``random`` or ``grid``), ``trials`` per variant and draw (the same for every
    variant, the labels-only baseline's learning rate included), each scored on the validation
    day averaged over ``seeds`` training seeds. ``draws: per_seed`` gives every final seed a
    search of its own, scored on validation seeds that are never final seeds, so the search's
    luck varies with the seed and lies inside the intervals; ``shared`` is the single draw of
    earlier versions (their run keys). ``seed`` seeds the samplers; another value redraws every
    search with the training seeds unchanged. ``knobs`` replace the declared ranges of knobs
    they name: a list of values (categorical) or ``{low, high, log, int}``; ``lr`` and
    ``ema_decay`` are the student's."""

    #: Optuna's sampler (grid needs a list of values for every knob)
    sampler: Sampler = "tpe"
    #: trials per variant and draw, the same for every variant with knobs (the first at the
    #: defaults; per_seed: the student's lr is a knob of every variant, the baseline's too)
    trials: Annotated[int, _TRIALS] = 8
    #: training seeds each trial's validation NE is averaged over
    seeds: Annotated[int, _TRIALS] = 1
    #: the samplers' seed (null: per_seed draws the final seed's own, shared the spec's first
    #: training seed); another value redraws every search with the training seeds unchanged
    seed: int | None = quiet()
    #: per_seed: each final seed s its own search, scored on validation seeds s + 1000, s + 2000,
    #: ... (never a final seed), its choice trains seed s; shared: one search per (variant, lag,
    #: world) for every seed, scored on the first seeds, lr and ema_decay searched only when
    #: named in knobs (the runs, and run keys, of earlier versions)
    draws: TuningDraws = "per_seed"
    #: candidates each search asks for at once (TPE's constant liar stands in for the scores
    #: not yet known): a round trains batch × draws runs of a variant, which packs train in one
    #: pass; 1 asks one at a time, each after the last one's score (the runs of earlier versions)
    batch: Annotated[int, int_at_least(1, "key 'batch' must be an int >= 1 (candidates asked "
                                          "for at once), got {value!r}")] = quiet(1)
    #: knob (alpha, kd_weight, temperature, aux_beta, adapter_hidden, your method's, or the
    #: student's lr and ema_decay) → its range here: a list of values or {low, high, log, int}
    knobs: dict[str, Any] = quiet(factory=dict, takes="a knob's range")

    def __post_init__(self) -> None:
        check_fields(self)
        for key, value in self.knobs.items():
            if isinstance(value, list) and value:
                continue
            if isinstance(value, dict) and {"low", "high"} <= set(value) \
                    and set(value) <= {"low", "high", "log", "int"}:
                continue
            raise ValueError(f"key 'knobs': knob {key!r} must be a non-empty list of values to try "
                             f"or a range {{low, high, log, int}}, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return as_mapping(self)


@dataclass
class RobustnessSpec:
    """Whether the verdicts survive another CPU (DESIGN §6, verdict robustness): ``perturb:
    ulp`` repeats every variant's search and final runs with each student's initial weights
    moved by one unit in the last place (up or down, drawn from the run's seed; zeros kept),
    into ``RUN_DIR/perturbed/`` under keys of their own, and the report marks a primary verdict
    that differs there as fragile. A run is deterministic on one machine, but another CPU rounds
    its sums differently, and the training and the search amplify a last-bit difference into
    other choices and other numbers; the repeat is such a difference, made on purpose. It costs
    the student runs once more (not the teacher, store or codes, which it shares)."""

    #: null: no repeat; ulp: repeat the search and the final runs with every student's initial
    #: weights moved by one ulp, and mark the primary verdicts that flip as fragile
    perturb: Literal["ulp"] | None = quiet()

    def to_dict(self) -> dict[str, Any]:
        return as_mapping(self)


_SAMPLES = at_least(100, "bootstrap: key 'samples' must be >= 100, got {value}")


@dataclass
class BootstrapSpec:
    """The paired, user-level cluster bootstrap of every interval (DESIGN §6): ``samples``
    resamples, drawn from ``seed``."""

    #: resamples of the evaluation users (at least 100)
    samples: Annotated[int, _SAMPLES] = 1000
    #: the resamples' random seed
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields(self)

    def to_dict(self) -> dict[str, Any]:
        return as_mapping(self)


@dataclass
class ReprSpec:
    """How the LoopFM codes are made and read: the teacher ``layer`` the store keeps and the
    compressor reads (None: the teacher config's ``repr_layer``), ``code_dim``, ``bits`` (8 or
    4), the compressor's ``epochs``, and the ``max_events`` most recent codes a student example
    reads."""

    #: the teacher representation the store keeps and the compressor reads (null: the teacher
    #: config's repr_layer)
    layer: str | None = None
    #: the width of a code
    code_dim: int = 8
    #: bits per code value (8 or 4)
    bits: int = 8
    #: the most recent codes of the user's history a student example reads
    max_events: int = 50
    #: the compressor's training epochs
    epochs: int = 10

    def to_dict(self) -> dict[str, Any]:
        return as_mapping(self)


@dataclass
class SolarisSpec:
    """How the SOLARIS pair representations of variants with ``solaris`` are precomputed
    (docs/guides/solaris.md): for each student and evaluation day d, the speculation ``policy``
    picks up to ``k`` items per user from the log before d, and the teacher as of d - 1 (under
    streaming the freshest daily checkpoint, else the lag's teacher) computes each pair's
    ``layer`` vector on a row of the user's history and the item's features."""

    #: the speculation policy: recent, popular, cooccur or an import path, with its init_args
    policy: PluginSpec = field(default_factory=lambda: PluginSpec("recent"))
    #: the pairs precomputed per user and day (the policy's top k)
    k: Annotated[int, int_at_least(1, "'k' must be an int >= 1, got {value!r}")] = 8
    #: the teacher representation precomputed (null: repr.layer, else the teacher config's)
    layer: str | None = None
    #: the categorical feature naming a row's item (null: the schema's item id)
    item_feature: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):
            self.policy = PluginSpec(self.policy)
        check_fields(self)

    def to_dict(self) -> dict[str, Any]:
        return as_mapping(self)
