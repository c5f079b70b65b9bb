"""The experiment spec as typed, nested dataclasses (one YAML file, DESIGN §6.1).

Every section is a dataclass; :func:`gemkd.transfer.config.build_dataclass` is the one validator
that builds them from YAML (unknown keys and wrong types are errors naming the key). Sections that
point at another config (``data:``, ``teacher:``, ``hierarchical:``) keep their extra keys as
``overrides`` of that config, checked against it by :mod:`gemkd.experiments.run.preflight` before
any work starts. docs/reference/spec.md lists every key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

from gemkd.experiments.spec.primary import PrimarySpec
from gemkd.transfer.constraints import (
    Rule,
    at_least,
    check_fields,
    half_open,
    int_at_least,
    one_of,
    unique,
)
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.options import (
    ACCELERATORS,
    PROTOCOLS,
    SAMPLERS,
    TABLE_OPTIMIZERS,
    TEACHER_SOURCES,
    Accelerator,
    Sampler,
    TableOptimizer,
    TeacherProtocol,
    TeacherSource,
    TrackerKind,
    TuningDraws,
)

#: KD whose temperature keeps the student's mean probability at the target's (losses.py)
_KD_CAL = {"class_path": "kd", "init_args": {"loss": "bce_cal"}}
BUILTIN_VARIANTS: dict[str, Any] = {
    "baseline": [],
    "kd": ["kd"],
    "kd_aux": ["kd", "aux_head"],
    "kd_aux_adapter": ["kd", "aux_head", "adapter"],
    "kd_repr": ["kd", "repr"],
    "hierarchical": {"teacher": "domain_fm", "methods": ["kd"]},
    # KD on an aux head + LoopFM codes; the Student Adapter left out: inside it, it did not pay
    # at lags 0/3/6 on the benchmark (docs/results/STALENESS.md; kd_aux_adapter keeps it)
    "full": ["kd", "aux_head", "repr"],
    # KD from a student whose embedding tables start from the teacher's (needs its checkpoint)
    "kd_share": ["kd", "param_share"],
    # KD with loss bce_cal, alone and on the Student Adapter's realigned targets
    "kd_cal": [_KD_CAL],
    "kd_adapter_cal": [_KD_CAL, "adapter"],
    # KD + SOLARIS pair representations (docs/guides/solaris.md)
    "kd_solaris": ["kd", "solaris"],
    # full + SOLARIS pair representations beside the LoopFM codes
    "full_solaris": ["kd", "aux_head", "repr", "solaris"],
}
#: The variants of a spec that names none: the first seven (the later ones are opt-in: kd_share
#: needs a teacher checkpoint, and each adds a search to every run)
DEFAULT_VARIANTS: tuple[str, ...] = ("baseline", "kd", "kd_aux", "kd_aux_adapter", "kd_repr",
                                     "hierarchical", "full")


def _open_section(cls, values: Any, where: str, fixed: tuple[str, ...]):
    """A section with a few named keys; every other key is kept in ``overrides``."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {values!r}")
    from gemkd.transfer.config import build_dataclass

    named = {k: v for k, v in values.items() if k in fixed}
    obj = build_dataclass(cls, named, where)
    obj.overrides = {k: v for k, v in values.items() if k not in fixed}
    return obj


_WORLDS = unique("key 'seeds' must list at least one world seed, each once, got {value}")


@dataclass
class DataSpec:
    """``source`` synthetic | movielens | kuairand | import; ``preset`` (synthetic: a name in
    experiments/data or a YAML path); ``src`` (real data: the source directory or file);
    ``seeds`` (synthetic: the world seeds the experiment is replicated over, one world each;
    unset: the preset's one world); every other key overrides the source's own config (e.g.
    ``examples_per_day``)."""

    #: synthetic, movielens, kuairand, import (a log and its ``mapping``) or dataset (a gemkd
    #: dataset made before: a directory or s3:// URI, read in place)
    source: str = "synthetic"
    #: synthetic: the world's config, a name in experiments/data or a YAML path
    preset: str | None = None
    #: real data: the source directory or file (dataset: the dataset itself)
    src: str | None = None
    #: synthetic: the worlds the experiment is replicated over, one seed each (each its own
    #: data, teachers and students; a verdict must hold in most); null: the preset's one world
    seeds: Annotated[list[int], _WORLDS] | None = None
    #: every other key overrides a key of the source's own config (e.g. examples_per_day; an
    #: import's mapping; movielens n_days; kuairand tasks)
    overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def from_mapping(cls, values: Any, where: str) -> DataSpec:
        obj = _open_section(cls, values, where, ("source", "preset", "src", "seeds"))
        if obj.seeds is not None:
            if obj.source != "synthetic":
                raise ConfigError(f"{where}: key 'seeds' replicates the synthetic world; source "
                                  f"{obj.source} is one dataset (replicate real data over "
                                  "datasets: gemkd report --markdown RUN_DIR...)")
            if "seed" in obj.overrides:
                raise ConfigError(f"{where}: give the world's seed as 'seed' or its replicates "
                                  "as 'seeds', not both")
        return obj

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        if self.preset is not None:
            out["preset"] = self.preset
        if self.src is not None:
            out["src"] = self.src
        if self.seeds is not None:
            out["seeds"] = list(self.seeds)
        return {**out, **self.overrides}


@dataclass
class TeacherSpec:
    """``config`` a teacher config (a name in experiments/teachers or a YAML path); ``store``
    a verified teacher-output store to use instead of training one (``gemkd store import``);
    every other key overrides a key of the teacher config (e.g. ``max_seq_len``)."""

    #: a teacher config: a name in experiments/teachers or a path to a teacher config YAML
    config: str = "small"
    #: a verified teacher-output store (directory or s3:// URI) used instead of training a
    #: teacher (gemkd store import)
    store: str | None = None
    #: every other key overrides a key of the teacher config (e.g. max_seq_len, init_from; the
    #: days are set by the protocol)
    overrides: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, values: Any, where: str) -> TeacherSpec:
        return _open_section(cls, values, where, ("config", "store"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"config": self.config}
        if self.store is not None:
            out["store"] = self.store
        return {**out, **self.overrides}


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


@dataclass
class VariantSpec:
    """A variant: its transfer ``methods`` (in the order they run) and the ``teacher`` source
    they learn from (``gem``, or ``domain_fm`` for hierarchical transfer); ``twin_of`` marks an
    A/A twin (``twins:``), the same methods and teacher as the variant it names under another
    name, so its own search draw: the run's check of its false verdicts."""

    #: the variant's name (its key in ``variants``)
    name: str
    #: transfer methods in the order they run: built-in names (kd, aux_head, adapter, repr,
    #: param_share) or import paths, each optionally {class_path, init_args}; empty: labels only
    methods: list[PluginSpec] = field(default_factory=list)
    #: the teacher the methods learn from: the run's GEM, or the per-domain FM (hierarchical)
    teacher: TeacherSource = "gem"
    #: an A/A twin of this variant (the same methods and teacher; made by twins:), or null
    twin_of: str | None = None

    @classmethod
    def parse(cls, name: str, value: Any, where: str) -> VariantSpec:
        if isinstance(value, list):
            value = {"methods": value}
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: variant {name!r} must be a list of methods or a "
                              f"mapping with methods (and teacher), got {value!r}")
        unknown = sorted(set(value) - {"methods", "teacher", "twin_of"})
        if unknown:
            raise ConfigError(f"{where}: variant {name!r}: unknown key {unknown[0]!r} "
                              "(keys: methods, teacher, twin_of)")
        twin_of = value.get("twin_of")
        if twin_of is not None and not isinstance(twin_of, str):
            raise ConfigError(f"{where}: variant {name!r}: twin_of must be a variant's name, "
                              f"got {twin_of!r}")
        methods = value.get("methods") or []
        if not isinstance(methods, list):
            raise ConfigError(f"{where}: variant {name!r}: methods must be a list")
        teacher = value.get("teacher", "gem")
        if teacher not in TEACHER_SOURCES:
            raise ConfigError(f"{where}: variant {name!r}: teacher {teacher!r}; expected one of "
                              f"{', '.join(TEACHER_SOURCES)}")
        return cls(name, [PluginSpec.from_mapping(m, f"{where}.{name}[{i}]")
                          for i, m in enumerate(methods)], teacher, twin_of)

    def to_value(self) -> Any:
        methods = [m.to_dict() for m in self.methods]
        if self.twin_of is not None:
            return {**({} if self.teacher == "gem" else {"teacher": self.teacher}),
                    "methods": methods, "twin_of": self.twin_of}
        return methods if self.teacher == "gem" else {"teacher": self.teacher,
                                                       "methods": methods}


def twin_name(original: str, k: int) -> str:
    """The k-th A/A twin of ``original`` (1-based): ``kd_twin1``."""
    return f"{original}_twin{k}"


def expand_twins(variants: list[VariantSpec], twins: dict[str, int]) -> list[VariantSpec]:
    """``variants`` with ``twins[name]`` A/A twins of each named variant appended (the same
    methods and teacher, named :func:`twin_name`). A twin already listed (a spec.yaml written
    by a run) is kept as it is; any other variant of a twin's name is a clash, and a twin must
    be its original's copy. ValueErrors name the key."""
    by_name = {v.name: v for v in variants}
    for name, count in twins.items():
        if name not in by_name or by_name[name].twin_of is not None:
            raise ValueError(f"'twins': {name!r} is not a variant of the spec (variants: "
                             f"{', '.join(v.name for v in variants if v.twin_of is None)})")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"'twins': {name}: expected a number of twins >= 1, got {count!r}")
        for k in range(1, count + 1):
            twin = VariantSpec(twin_name(name, k), list(by_name[name].methods),
                               by_name[name].teacher, name)
            have = by_name.get(twin.name)
            if have is None:
                variants = [*variants, twin]
                by_name[twin.name] = twin
            elif have.twin_of != name:
                raise ValueError(f"'twins': {name}: {count} twin(s) would be named "
                                 f"{twin.name!r}, which the spec already uses for another "
                                 "variant; rename that variant")
    for v in variants:
        if v.twin_of is None:
            continue
        original = by_name.get(v.twin_of)
        if original is None or original.twin_of is not None:
            raise ValueError(f"variant {v.name!r}: twin_of {v.twin_of!r} is not a variant of "
                             "the spec (a twin's original cannot itself be a twin)")
        if (v.teacher, [m.to_dict() for m in v.methods]) != \
                (original.teacher, [m.to_dict() for m in original.methods]):
            raise ValueError(f"variant {v.name!r} is marked twin_of {v.twin_of!r} but its "
                             "methods or teacher differ: a twin is the same variant under "
                             "another name")
    return variants


def parse_variants(value: Any, where: str = "spec variants") -> list[VariantSpec]:
    """A list of built-in variant names, or a mapping name → methods (or {teacher, methods})."""
    if isinstance(value, list):
        unknown = [v for v in value if not isinstance(v, str) or v not in BUILTIN_VARIANTS]
        if unknown:
            raise ConfigError(f"{where}: unknown variant {unknown[0]!r}; built-in variants are "
                              f"{', '.join(BUILTIN_VARIANTS)} (define your own as a mapping "
                              "name: [methods])")
        value = {v: BUILTIN_VARIANTS[v] for v in value}
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{where}: expected a non-empty list of variant names or a mapping "
                          f"name: [methods], got {value!r}")
    return [VariantSpec.parse(str(k), v, where) for k, v in value.items()]


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
    search with the training seeds unchanged. Every other key names a knob and replaces its
    declared range: a list of values (categorical) or ``{low, high, log, int}``; ``lr`` and
    ``ema_decay`` are the student's."""

    #: Optuna's sampler (grid needs a list of values for every knob)
    sampler: Annotated[Sampler, one_of(SAMPLERS, f"key 'sampler' must be one of "
                                                 f"{', '.join(SAMPLERS)}, got {{value!r}}")] = "tpe"
    #: trials per variant and draw, the same for every variant with knobs (the first at the
    #: defaults; per_seed: the student's lr is a knob of every variant, the baseline's too)
    trials: Annotated[int, _TRIALS] = 8
    #: training seeds each trial's validation NE is averaged over
    seeds: Annotated[int, _TRIALS] = 1
    #: the samplers' seed (null: per_seed draws the final seed's own, shared the spec's first
    #: training seed); another value redraws every search with the training seeds unchanged
    seed: int | None = None
    #: per_seed: each final seed s its own search, scored on validation seeds s + 1000, s + 2000,
    #: ... (never a final seed), its choice trains seed s; shared: one search per (variant, lag,
    #: world) for every seed, scored on the first seeds, lr and ema_decay searched only when
    #: named below (the runs, and run keys, of earlier versions)
    draws: TuningDraws = "per_seed"
    #: candidates each search asks for at once (TPE's constant liar stands in for the scores
    #: not yet known): a round trains batch × draws runs of a variant, which packs train in one
    #: pass; 1 asks one at a time, each after the last one's score (the runs of earlier versions)
    batch: Annotated[int, int_at_least(1, "key 'batch' must be an int >= 1 (candidates asked "
                                          "for at once), got {value!r}")] = 1
    #: every other key names a knob (alpha, kd_weight, temperature, aux_beta, adapter_hidden,
    #: your method's, or the student's lr and ema_decay) and replaces its range: a list of values
    #: or {low, high, log, int}
    overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def from_mapping(cls, values: Any, where: str) -> TuningSpec:
        obj = _open_section(cls, values, where, ("sampler", "trials", "seeds", "seed", "draws",
                                                 "batch"))
        for key, value in obj.overrides.items():
            if isinstance(value, list) and value:
                continue
            if isinstance(value, dict) and {"low", "high"} <= set(value) \
                    and set(value) <= {"low", "high", "log", "int"}:
                continue
            raise ConfigError(f"{where}: key {key!r} must be a non-empty list of values "
                              f"to try or a range {{low, high, log, int}}, got {value!r}")
        return obj

    def to_dict(self) -> dict[str, Any]:
        seed = {} if self.seed is None else {"seed": self.seed}  # unset: a spec's tag unchanged
        batch = {} if self.batch == 1 else {"batch": self.batch}  # likewise
        return {"sampler": self.sampler, "trials": self.trials, "seeds": self.seeds, **seed,
                "draws": self.draws, **batch, **self.overrides}

    @property
    def knobs(self) -> dict[str, Any]:
        """Knob → the spec's list or range for it."""
        return dict(self.overrides)


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
        return {"policy": self.policy.to_dict(), "k": self.k, "layer": self.layer,
                "item_feature": self.item_feature}


#: the rules of RunSpec's keys (checked by :func:`gemkd.transfer.constraints.check_fields`)
_SEEDS = Rule(bool, "'seeds' must list at least one seed")
_SEEDS_ONCE = unique("'seeds' lists a seed twice: {value}", nonempty=False)
_PROTOCOL = one_of(PROTOCOLS, f"'teacher_protocol' must be one of {', '.join(PROTOCOLS)}, got "
                              "{value!r}")
_DAYS = half_open("{key!r} must be a half-open range [first, end), got {value}")
_TASKS = unique("'student_tasks' must list at least one task, each once, got {value}")
_STEP = "'batch_size' must be >= 1 and 'lr' > 0"
_ACCELERATOR = one_of(ACCELERATORS, f"'accelerator' must be one of {', '.join(ACCELERATORS)}, "
                                    "got {value!r}")
_VAL_DAYS = at_least(0, "'teacher_val_days' must be >= 0, got {value}")
_EMA = Rule(lambda v: 0 < v < 1, "'ema_decay' must be in (0, 1) or null, got {value}")


@dataclass
class RunSpec:
    """An experiment: its data, teacher, students, variants, days and statistics.

    Built from YAML by :func:`gemkd.experiments.spec.load_spec`; every key is a field below,
    with its default and its rule beside it (docs/reference/spec.md lists them). Construction
    checks each field's rules and the rules relating several (the days' order, the teacher's
    windows, the twins and the primary family); a broken one is a ValueError naming the key.
    """

    #: the run's name (the run directory defaults to runs/<name>)
    name: str = "experiment"
    #: the students' training seeds: every number is a mean ± std over them
    seeds: Annotated[list[int], _SEEDS, _SEEDS_ONCE] = field(default_factory=lambda: [0, 1, 2])
    #: the data: the synthetic world, a real log, or a dataset made before
    data: DataSpec = field(default_factory=lambda: DataSpec(preset="small"))
    #: the teacher: a config to train, or a store to use
    teacher: TeacherSpec = field(default_factory=TeacherSpec)
    #: T: the teachers learn from days before T; a lag-L teacher's window ends at T - L
    teacher_days: int = 9
    # window: each lag's teacher is its own fit on a window of equal length (age isolated from
    # data amount); streaming: one time-ordered pass over [0, teacher_days) with daily
    # checkpoints, the lag-L teacher being the checkpoint of day teacher_days - L - 1
    teacher_protocol: Annotated[TeacherProtocol, _PROTOCOL] = "window"
    teacher_stream_start: int = 0  # streaming: the pass's first day (a teacher of fewer days)
    #: W: every lag's window is [T - L - W, T - L), one length for all, so a lag sweep measures
    #: age alone (streaming: the days the domain FMs and codes learn from); null: all before
    teacher_window_days: int | None = None
    #: the window's last days, held out to choose the teacher's epoch (the best validation loss
    #: is kept; training stops at the first epoch that is worse); null: 1 when the teacher's
    #: config trains several epochs (max_epochs > 1, e.g. small's 2: without a validation day
    #: the second memorises ids), else 0 (one pass has no epoch to choose; streaming: 0); 0: no
    #: validation, the config's max_epochs are all trained
    teacher_val_days: Annotated[int | None, _VAL_DAYS] = None
    #: half-open [first, end): the student's one pass in time order (its last day validates
    #: the tuning)
    student_days: Annotated[list[int], _DAYS] = field(default_factory=lambda: [9, 12])
    #: half-open [first, end): the evaluation days
    eval_days: Annotated[list[int], _DAYS] = field(default_factory=lambda: [12, 14])
    #: the teacher's age L in days: an int, or a list (a lag sweep, one teacher per lag)
    teacher_lag_days: int | list[int] = 0
    #: the student model: class_path (mlp, dcn, seq_pool or an import path) and init_args
    student: PluginSpec = field(default_factory=lambda: PluginSpec("mlp"))
    #: the tasks the student learns and is evaluated on
    student_tasks: Annotated[list[str], _TASKS] = field(
        default_factory=lambda: ["click", "conversion"])
    #: the vertical: the student trains and is evaluated on this domain's rows (null: all)
    student_domain: str | None = None
    #: the variants compared: a list of built-in names, or a mapping name: [methods] (or name:
    #: {teacher, methods}) defining your own
    variants: Any = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    #: the student's batch size
    batch_size: Annotated[int, at_least(1, _STEP)] = 256
    #: the student's learning rate
    lr: Annotated[float, Rule(lambda v: v > 0, _STEP)] = 0.01
    #: how the student's ID tables are updated: rowwise_adagrad or sparse_adam (only the rows
    #: a batch looked up, at 10 x lr; their weight average likewise) or dense_adamw (every row)
    table_optimizer: Annotated[TableOptimizer, one_of(
        TABLE_OPTIMIZERS, "'table_optimizer' must be one of "
        f"{', '.join(TABLE_OPTIMIZERS)}, got {{value!r}}")] = "dense_adamw"
    #: under a row-wise table_optimizer, tables with fewer rows stay dense (a batch reads most
    #: of their rows)
    table_min_rows: Annotated[int, at_least(0, "'table_min_rows' must be >= 0, got {value}")] = 1024
    #: the kd method's default loss: bce (with temperature and T²), bce_cal (the same, the
    #: student's mean probability kept at the target's at any temperature) or mse on logits
    kd_loss: str = "bce"
    #: the equal-budget search of every variant's knobs
    tuning: TuningSpec = field(default_factory=TuningSpec)
    #: the paired, user-level cluster bootstrap behind every interval and verdict
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)
    #: the report's primary family: the comparisons its verdicts and headline rest on, adjusted
    #: together (Holm, 5 %); left out: every variant vs kd and kd vs baseline
    primary: PrimarySpec = field(default_factory=PrimarySpec)
    #: A/A twins: variant name -> how many copies to add (kd: 2 adds kd_twin1, kd_twin2, each
    #: with its own search draw); the report counts how many of them come out resolved
    twins: dict[str, int] = field(default_factory=dict)
    #: the LoopFM codes of variants with repr
    repr: ReprSpec = field(default_factory=ReprSpec)
    #: the SOLARIS pair representations of variants with solaris
    solaris: SolarisSpec = field(default_factory=SolarisSpec)
    #: the domain FM of variants with teacher: domain_fm (a teacher config and overrides, e.g.
    #: init_from: gem to start it from the lag's GEM)
    hierarchical: TeacherSpec = field(default_factory=lambda: TeacherSpec("domain_fm"))
    #: the students' Lightning accelerator (small models: cpu); teachers take their config's
    accelerator: Annotated[Accelerator, _ACCELERATOR] = "cpu"
    #: evaluate an exponential moving average of the student's weights with this decay (in
    #: (0, 1); the shipped specs use 0.98) instead of its last step's (null)
    ema_decay: Annotated[float, _EMA] | None = None
    #: the experiment tracker every fit of the run logs to (null: none); --logger overrides it
    logger: TrackerKind | None = None

    def __post_init__(self) -> None:
        #: the spec file's folder (load_spec sets it): relative config paths in the spec are
        #: also looked up there; an attribute, not a field (no spec key, not in spec.yaml)
        self.source_dir: Path | None = None
        check_fields(self)
        self.variants = expand_twins(self.variants if _parsed(self.variants)
                                     else parse_variants(self.variants), self.twins)
        self.primary.check({v.name: v.twin_of for v in self.variants}, self.lags,
                           self.student_tasks, self.student_domain)
        if self.student_days[0] < self.teacher_days or self.eval_days[0] < self.student_days[1]:
            raise ValueError(f"days must be ordered: teacher days before teacher_days "
                             f"({self.teacher_days}) <= student_days {self.student_days} <= "
                             f"eval_days {self.eval_days}")
        if self.teacher_protocol == "streaming" and self.teacher_val_days:
            raise ValueError("'teacher_protocol: streaming' is one pass with no epoch to "
                             f"choose: 'teacher_val_days' must be 0, got {self.teacher_val_days}")
        if self.teacher_stream_start and (self.teacher_protocol != "streaming" or not
                                          0 < self.teacher_stream_start
                                          < self.teacher_days - max(self.lags)):
            raise ValueError(f"'teacher_stream_start' {self.teacher_stream_start}: needs "
                             "teacher_protocol: streaming and a day before every lag's "
                             f"checkpoint (< {self.teacher_days - max(self.lags)})")
        for lag in self.lags:
            if not 0 <= lag < self.teacher_days:
                raise ValueError(f"teacher_lag_days {lag} must be in [0, teacher_days)")
            first, end = self.teacher_window(lag)
            if first < 0 or end - (self.teacher_val_days or 0) <= first:
                raise ValueError(
                    f"teacher_lag_days {lag}: the teacher's window [{first}, {end}) with "
                    f"teacher_window_days {self.teacher_window_days} and teacher_val_days "
                    f"{self.teacher_val_days} must start at day 0 or later and keep a training "
                    "day")

    def teacher_window(self, lag: int) -> tuple[int, int]:
        """The half-open window of recent days of a lag-``lag`` teacher (DESIGN §6.1):
        ``teacher_window_days`` ending at ``teacher_days - lag`` (all days before it when the
        window is unset). The window protocol's teacher learns from it (its last
        ``teacher_val_days`` days choose the epoch); under both protocols the lag's domain FMs
        and LoopFM codes are fit on it."""
        end = self.teacher_days - lag
        return (0 if self.teacher_window_days is None else end - self.teacher_window_days), end

    def teacher_seen(self, lag: int) -> tuple[int, int]:
        """The half-open days the lag-``lag`` teacher has trained on: its window, or under
        streaming every day from ``teacher_stream_start`` to ``teacher_days - lag`` (the
        checkpoint of the day before)."""
        first, end = self.teacher_window(lag)
        if self.teacher_protocol == "streaming":
            return self.teacher_stream_start, end
        return first, end - self.val_days()

    def val_days(self) -> int:
        """The validation days each lag's window holds out: ``teacher_val_days``, or where it
        is null 1 when the teacher's config (with the spec's overrides) trains more than one
        epoch and every lag's window has a day to spare, else 0 (a streaming or imported
        teacher: 0)."""
        if self.teacher_val_days is not None:
            return self.teacher_val_days
        if self.teacher_protocol == "streaming" or self.teacher.store is not None:
            return 0
        if self.teacher_epochs() <= 1:
            return 0
        windows = [self.teacher_window(lag) for lag in self.lags]
        return 1 if all(end - first >= 2 for first, end in windows) else 0

    def teacher_epochs(self) -> int:
        """``max_epochs`` of the teacher's config as the spec overrides it."""
        from gemkd.experiments.teacher_config import find_config
        from gemkd.transfer.config import load_yaml

        if "max_epochs" in self.teacher.overrides:
            return int(self.teacher.overrides["max_epochs"])
        path = find_config(self.teacher.config, "teachers", self.source_dir)
        return int(load_yaml(path).get("max_epochs", 1))

    @property
    def worlds(self) -> list[int | None]:
        """The world seeds the experiment replicates over (None: the data's one world)."""
        return list(self.data.seeds) if self.data.seeds is not None else [None]

    @property
    def lags(self) -> list[int]:
        lags = self.teacher_lag_days
        return list(lags) if isinstance(lags, list) else [lags]

    def variant(self, name: str) -> VariantSpec:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    @property
    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants]

    def to_dict(self) -> dict[str, Any]:
        """The spec as its YAML mapping (what ``spec.yaml`` of a run holds)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "variants":
                value = {v.name: v.to_value() for v in value}
            elif f.name in ("primary", "twins"):
                value = value.to_dict() if f.name == "primary" else dict(value)
                if not value:
                    continue  # unset: a spec.yaml (and inputs tag) as before these keys
            elif hasattr(value, "to_dict"):
                value = value.to_dict()
            elif f.name in ("repr", "bootstrap"):
                value = dict(vars(value))
            out[f.name] = value
        return out


def _parsed(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, VariantSpec)
                                                           for v in value)
