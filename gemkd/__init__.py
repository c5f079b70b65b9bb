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
from typing import Any

from experiments.version import __version__

_API: dict[str, str] = {
    # experiments
    "load_spec": "experiments.spec",
    "RunSpec": "experiments.spec",
    "run_experiment": "experiments.run.runner",
    "make_executor": "experiments.run.executors",
    "run_intervals": "experiments.report.intervals",
    "fit_teacher": "experiments.teacher_fit",
    "export_teacher": "experiments.teacher_export",
    "load_teacher_config": "experiments.teacher_config",
    "TeacherTrainConfig": "experiments.teacher_config",
    "render_report": "experiments.report",
    "write_report": "experiments.report",
    "report_command": "experiments.report",
    "summarize": "experiments.report",
    # data
    "SynthConfig": "transfer.data.synth",
    "generate": "transfer.data.synth",
    "convert_movielens": "transfer.data.movielens",
    "convert_kuairand": "transfer.data.kuairand",
    "import_logs": "transfer.data.importer",
    "load_mapping": "transfer.data.importer",
    "summarize_data": "transfer.data.summary",
    "DatasetReader": "transfer.data.reader",
    # stores and plug-in contracts
    "import_store": "transfer.store.importer",
    "TeacherStore": "transfer.store",
    "TransferMethod": "transfer.methods",
    "TeacherOutput": "transfer.models",
    "StudentOutput": "transfer.models",
    "build_student": "students",
}
_RENAMED = {"summarize_data": "summarize"}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'gemkd' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), _RENAMED.get(name, name))
    globals()[name] = value
    return value
