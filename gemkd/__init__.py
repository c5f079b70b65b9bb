"""gemkd's Python API: the functions under the ``gemkd`` commands, for notebooks and scripts.

Every command is a thin parser over one of these, called with the same arguments::

    import gemkd

    spec = gemkd.load_spec("experiments/quickstart.yaml", ["seeds=[0]"])
    results = gemkd.run_experiment(spec, "runs/notebook")       # gemkd run
    print(gemkd.report_command("runs/notebook"))                 # gemkd report

Names are imported on first use, so ``import gemkd`` stays cheap.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

# Run from the repository's own folder (its root first on sys.path: pytest, ``python -c``), this
# file is <repo>/gemkd/__init__.py, whose subpackages live beside it (pyproject's package-dir:
# gemkd.transfer = transfer/, ...): search the repository root too, so they resolve from the
# working tree, new files included. Installed (a wheel, or the strict editable install's tree),
# they are subfolders and nothing changes.
_HERE = Path(__file__).resolve().parent
if not (Path(__file__).parent / "transfer").is_dir() and (
        _HERE.parent / "transfer" / "__init__.py").is_file() and (
        _HERE.parent / "pyproject.toml").is_file():
    __path__.append(str(_HERE.parent))  # noqa: F821

from gemkd.experiments.version import __version__  # noqa: E402

_API: dict[str, str] = {
    # experiments
    "load_spec": "gemkd.experiments.spec",
    "RunSpec": "gemkd.experiments.spec",
    "run_experiment": "gemkd.experiments.run.runner",
    "make_executor": "gemkd.experiments.run.executors",
    "run_intervals": "gemkd.experiments.report.intervals",
    "fit_teacher": "gemkd.experiments.teacher.teacher_fit",
    "export_teacher": "gemkd.experiments.teacher.teacher_export",
    "load_teacher_config": "gemkd.experiments.teacher.teacher_config",
    "TeacherTrainConfig": "gemkd.experiments.teacher.teacher_config",
    "render_report": "gemkd.experiments.report",
    "write_report": "gemkd.experiments.report",
    "report_command": "gemkd.experiments.report",
    "plan_run": "gemkd.experiments.report.run_plan",
    "summarize": "gemkd.experiments.report",
    # data
    "SynthConfig": "gemkd.transfer.data.synth",
    "generate": "gemkd.transfer.data.synth",
    "convert_movielens": "gemkd.transfer.data.movielens",
    "convert_kuairand": "gemkd.transfer.data.kuairand",
    "import_logs": "gemkd.transfer.data.importer",
    "load_mapping": "gemkd.transfer.data.importer",
    "summarize_data": "gemkd.transfer.data.dataset_summary",
    "DatasetReader": "gemkd.transfer.data.dataset_reader",
    # stores and plug-in contracts
    "import_store": "gemkd.transfer.store.importer",
    "TeacherStore": "gemkd.transfer.store",
    "TransferMethod": "gemkd.transfer.methods",
    "TeacherOutput": "gemkd.transfer.models",
    "StudentOutput": "gemkd.transfer.models",
    "build_student": "gemkd.students",
    # distillation in a training loop of one's own (docs/guides/own_loop.md)
    "DistillDataModule": "gemkd.transfer.distill",
    "TeacherBatch": "gemkd.transfer.distill",
    "kd_bce": "gemkd.transfer.methods.losses",
    "StudentAdapter": "gemkd.adapters.student_adapter",
    "AsOfCodes": "gemkd.transfer.repr_features",
    # student artifacts (docs/guides/experiments.md)
    "export_student": "gemkd.experiments.artifacts",
    "score_artifact": "gemkd.experiments.artifacts",
    "StudentArtifact": "gemkd.experiments.artifacts",
    "encode_raw": "gemkd.experiments.artifacts",
}
_RENAMED = {"summarize_data": "summarize"}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'gemkd' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), _RENAMED.get(name, name))
    globals()[name] = value
    return value
