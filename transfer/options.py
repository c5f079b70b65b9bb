"""The enumerations that configs, specs and commands choose from, each defined once.

Each is a ``Literal`` type: a config field annotated with it is checked by
:func:`gemkd.transfer.config.check_value` (an unknown value is an error naming the key and the
choices), and :func:`choices` gives its values in order, for ``argparse`` ``choices`` and for
messages. This module imports nothing heavy, so a command's parser can read it without loading
torch.
"""

from __future__ import annotations

import typing
from typing import Literal

#: How a teacher fit runs: one process, DDP (gloo on CPU, nccl on GPU) or FSDP2
#: (``gemkd.transfer.training.trainer``)
Strategy = Literal["auto", "ddp", "fsdp"]
#: How a teacher-output store keeps the representation (``gemkd.transfer.store``)
EmbDtype = Literal["float16", "int8"]
#: The experiment trackers a fit can log to besides ``metrics.csv``
#: (``gemkd.transfer.training.loggers``)
TrackerKind = Literal["csv", "tensorboard", "mlflow"]
#: How a run's teachers are trained (a spec's ``teacher_protocol``, DESIGN §6.1): each lag its
#: own fit on an equal window, or one time-ordered pass with daily checkpoints
TeacherProtocol = Literal["window", "streaming"]
#: The Lightning accelerator of a fit (a spec's students, a teacher config); ``gpu`` and
#: ``cuda`` are the same device
Accelerator = Literal["auto", "cpu", "gpu", "cuda"]
#: Lightning's numeric precision of a fit (``Trainer(precision=...)``; a teacher config's);
#: ``auto``: bf16-mixed on a CUDA device, 32-true elsewhere
Precision = Literal["auto", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true",
                    "64-true", "transformer-engine", "transformer-engine-float16"]
#: What Lightning's Trainer takes: a :data:`Precision` with ``auto`` resolved
TrainerPrecision = Literal["32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true",
                           "64-true", "transformer-engine", "transformer-engine-float16"]
#: The Optuna sampler of the equal-budget search (a spec's ``tuning.sampler``)
Sampler = Literal["tpe", "random", "grid"]
#: The implementation of the jagged ops (``gemkd.transfer.ops``; GEM's ``kernel``): Triton on
#: CUDA tensors and the PyTorch reference elsewhere, or one of them forced
Kernel = Literal["auto", "torch", "triton"]
#: GEM's heads over the trunk (``gemkd.teachers.gem.heads``): one MLP per (domain, task), or
#: experts shared across domains mixed by a per-domain gate
HeadType = Literal["domain_task", "domain_gated"]
#: Where ``gemkd run`` executes its student runs (``gemkd.experiments.run.executors``): process
#: pools on this machine, or tasks on a Ray cluster
ExecutorName = Literal["local", "ray"]
#: Where ``gemkd data import`` runs its streaming passes (``gemkd.transfer.data.importer``):
#: this process, or tasks on a Ray cluster (the same dataset, byte for byte)
ImportEngine = Literal["local", "ray"]
#: The teacher a variant's methods learn from (a spec's ``variant_keys.<v>.teacher``): the run's
#: GEM, or its domain FM (hierarchical)
TeacherSource = Literal["gem", "domain_fm"]
#: How a run's searches are drawn (a spec's ``tuning.draws``): one per final seed, or one for
#: every seed (earlier versions)
TuningDraws = Literal["per_seed", "shared"]
#: Which epoch a teacher fit keeps (a teacher config's ``select``): the last, or the one with the
#: lowest validation loss
EpochSelect = Literal["last", "best"]
#: What a teacher join does with an example the store lacks (``gemkd.transfer.store.join``):
#: raise, or mask the example out of the distillation loss
JoinPolicy = Literal["error", "mask"]
#: The value type of a ``results.csv`` column (``gemkd.experiments.run_dir.results_schema``)
ColumnType = Literal["str", "int", "float"]
#: How embedding tables are updated (``gemkd.transfer.training.table_optim``): row-wise Adagrad
#: or lazy Adam over row-sparse gradients (only the rows a batch looked up), or dense AdamW
#: over every row (the reference)
TableOptimizer = Literal["rowwise_adagrad", "sparse_adam", "dense_adamw"]
#: Which of a run's final students it keeps in ``RUN_DIR/students`` for ``gemkd student
#: export``: none, the median-NE seed of each variant (per lag and world), or every one
KeepStudents = Literal["none", "median", "all"]


def choices(kind: typing.Any) -> tuple[str, ...]:
    """The values of a ``Literal`` type, in their declared order."""
    if typing.get_origin(kind) is not Literal:
        raise TypeError(f"{kind!r} is not a Literal type")
    return typing.get_args(kind)


STRATEGIES = choices(Strategy)
EMB_DTYPES = choices(EmbDtype)
TRACKERS = choices(TrackerKind)
PROTOCOLS = choices(TeacherProtocol)
KEEP_STUDENTS = choices(KeepStudents)
ACCELERATORS = choices(Accelerator)
SAMPLERS = choices(Sampler)
KERNELS = choices(Kernel)
HEAD_TYPES = choices(HeadType)
EXECUTORS = choices(ExecutorName)
IMPORT_ENGINES = choices(ImportEngine)
TEACHER_SOURCES = choices(TeacherSource)
TUNING_DRAWS = choices(TuningDraws)
SELECTS = choices(EpochSelect)
JOIN_POLICIES = choices(JoinPolicy)
TABLE_OPTIMIZERS = choices(TableOptimizer)
