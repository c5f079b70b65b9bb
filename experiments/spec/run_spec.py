"""The experiment spec as typed, nested dataclasses (one YAML file, DESIGN §6.1).

Every section is a dataclass; :func:`gemkd.transfer.config.build_dataclass` is the one validator
that builds them from YAML (unknown keys and wrong types are errors naming the section and the
key). Sections that point at another config (``data:``, ``teacher:``, ``hierarchical:``) take
keys of that config under ``overrides:``, checked against it by
:mod:`gemkd.experiments.run.preflight` before any work starts; ``tuning:`` takes knob ranges
under ``knobs:``. docs/reference/spec.md lists every key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from gemkd.experiments.spec.primary import PrimarySpec
from gemkd.experiments.spec.sections import (
    BootstrapSpec,
    DataSpec,
    PluginSpec,
    ReprSpec,
    RobustnessSpec,
    SolarisSpec,
    TeacherSpec,
    TuningSpec,
    as_mapping,
    quiet,
)
from gemkd.experiments.spec.variants import (
    BUILTIN_VARIANTS,
    DEFAULT_VARIANTS,
    VariantSpec,
    expand_twins,
    parse_variants,
    twin_name,
)
from gemkd.transfer.constraints import (
    Rule,
    at_least,
    check_fields,
    half_open,
    unique,
)
from gemkd.transfer.options import (
    Accelerator,
    KeepStudents,
    TableOptimizer,
    TeacherProtocol,
    TrackerKind,
)

__all__ = ["BUILTIN_VARIANTS", "BootstrapSpec", "DEFAULT_VARIANTS", "DataSpec", "PluginSpec",
           "PrimarySpec", "ReprSpec", "RobustnessSpec", "RunSpec", "SolarisSpec", "TeacherSpec",
           "TuningSpec", "VariantSpec", "expand_twins", "parse_variants", "twin_name"]

#: the rules of RunSpec's keys (checked by :func:`gemkd.transfer.constraints.check_fields`)
_SEEDS = Rule(bool, "'seeds' must list at least one seed")
_SEEDS_ONCE = unique("'seeds' lists a seed twice: {value}", nonempty=False)
_DAYS = half_open("{key!r} must be a half-open range [first, end), got {value}")
_TASKS = unique("'student_tasks' must list at least one task, each once, got {value}")
_STEP = "'batch_size' must be >= 1 and 'lr' > 0"
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
    teacher_protocol: TeacherProtocol = "window"
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
    table_optimizer: TableOptimizer = "dense_adamw"
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
    primary: PrimarySpec = quiet(factory=PrimarySpec)
    #: repeat the search and final runs under perturbed numerics and mark the primary verdicts
    #: that flip as fragile (null perturb: no repeat)
    robustness: RobustnessSpec = quiet(factory=RobustnessSpec)
    #: A/A twins: variant name -> how many copies to add (kd: 2 adds kd_twin1, kd_twin2, each
    #: with its own search draw); the report counts how many of them come out resolved
    twins: dict[str, int] = quiet(factory=dict)
    #: the LoopFM codes of variants with repr
    repr: ReprSpec = field(default_factory=ReprSpec)
    #: the SOLARIS pair representations of variants with solaris
    solaris: SolarisSpec = field(default_factory=SolarisSpec)
    #: the domain FM of variants with teacher: domain_fm (a teacher config and overrides, e.g.
    #: overrides: {init_from: gem} to start it from the lag's GEM)
    hierarchical: TeacherSpec = field(default_factory=lambda: TeacherSpec("domain_fm"))
    #: the students' Lightning accelerator (small models: cpu); teachers take their config's
    accelerator: Accelerator = "cpu"
    #: evaluate an exponential moving average of the student's weights with this decay (in
    #: (0, 1); the shipped specs use 0.98) instead of its last step's (null)
    ema_decay: Annotated[float, _EMA] | None = None
    #: the experiment tracker every fit of the run logs to (null: none); --logger overrides it
    logger: TrackerKind | None = None
    #: which final students the run keeps in RUN_DIR/students for `gemkd student export`:
    #: median (each variant's median-NE seed per lag and world), all, or none
    keep_students: KeepStudents = "median"

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
        window is unset). The window protocol's teacher learns from it (its last validation days,
        :attr:`gemkd.experiments.run.spec_plan.RunPlan.val_days`, choose the epoch); under both
        protocols the lag's domain FMs and LoopFM codes are fit on it."""
        end = self.teacher_days - lag
        return (0 if self.teacher_window_days is None else end - self.teacher_window_days), end

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
        """The spec as its YAML mapping (what ``spec.yaml`` of a run holds), read from its
        fields (:func:`~gemkd.experiments.spec.sections.as_mapping`)."""
        out = as_mapping(self)
        out["variants"] = {v.name: v.to_value() for v in self.variants}
        return out


def _parsed(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, VariantSpec)
                                                           for v in value)
