"""Steps cached by the hash of their config and their code: a rerun (or a resumed crash) skips
finished work, and a rerun after gemkd's code changed never reuses a stale step.

A step's output lives in ``cache/<name>-<hash>``; it counts as done only when ``DONE`` exists,
written after the step returned, so a step killed half-way is redone (steps themselves write
atomically or resume from their own checkpoints). The hash covers the step's config, gemkd's
version and the source of the modules the step runs (:data:`STEP_CODE`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gemkd.experiments.run.progress import StepLog, step_log
from gemkd.transfer.teacher_fit_dir import TeacherFitDir

ROOT = Path(__file__).resolve().parents[2]
# what a step writes before it starts work: its key, a teacher fit's resolved config
CONFIG_FILES = {"config.json", TeacherFitDir.CONFIG}
_G = "gemkd."
_DATA = tuple(_G + m for m in ("transfer.data", "transfer.io", "transfer.errors",
                               "transfer.config"))
_TEACHER = (*_DATA, *(_G + m for m in (
    "transfer.options", "transfer.training", "transfer.ops", "transfer.metrics", "transfer.layers",
    "transfer.models", "teachers", "experiments.teacher.teacher_config",
    "experiments.teacher.teacher_checkpoint", "experiments.teacher.teacher_fit")))
_STORE = (*_TEACHER, _G + "transfer.store", _G + "experiments.teacher.teacher_export")
#: The code each cached step runs: gemkd's modules and packages by import name (a package stands
#: for every module under it), found by import when a key is made (:func:`step_sources`), so a
#: module that moved fails loudly instead of silently dropping out of the step's key.
STEP_CODE: dict[str, tuple[str, ...]] = {
    "data": _DATA,
    "teacher": _TEACHER,
    "store": _STORE,
    "domain_fm": (*_STORE, *(_G + m for m in ("transfer.distill", "transfer.methods",
                                              "experiments.run.domain_fm_step"))),
    "codes": (*_STORE, _G + "transfer.repr_features", _G + "adapters.compressor"),
    "pairs": (*_STORE, *(_G + m for m in ("transfer.solaris", "experiments.run.solaris_precompute",
                                          "experiments.run.solaris_step"))),
    "students": tuple(_G + m for m in ("transfer", "teachers", "students", "adapters",
                                       "experiments.run", "experiments.spec")),
}


def step_sources(step: str) -> tuple[str, ...]:
    """The files and package folders (relative to :data:`ROOT`) of ``STEP_CODE[step]``'s
    modules; a module that cannot be found is an error naming it."""
    out = []
    for module in STEP_CODE[step]:
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        where = (None if spec is None else spec.submodule_search_locations or
                 ([spec.origin] if spec.origin else None))
        if not where:
            raise RuntimeError(f"gemkd.experiments.run.cache.STEP_CODE[{step!r}] names {module!r}, "
                               "which cannot be imported: update STEP_CODE (a moved module "
                               "must not drop out of the step's cache key)")
        out.append(str(Path(list(where)[0]).resolve().relative_to(ROOT)))
    return tuple(out)


@functools.cache
def code_hash(paths: tuple[str, ...], root: Path = ROOT) -> str:
    """sha256 over gemkd's version and every ``.py`` file under ``paths`` (sorted, with names),
    so any edit of a module a step runs changes the step's key."""
    return source_hash(paths, root)


def source_hash(paths: tuple[str, ...], root: Path) -> str:
    """:func:`code_hash` read afresh (a user's plug-in may change between two runs of one
    process)."""
    from gemkd.experiments.version import __version__

    h = hashlib.sha256(__version__.encode())
    files: set[Path] = set()
    for rel in paths:
        p = root / rel
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such source file or folder to hash")
        # each file by its real path: gemkd imported from the editable install's tree of links
        # and from the source folders (a worker whose working directory is a checkout) must
        # hash the same files under the same names, or their steps' keys differ
        files |= {p.resolve()} if p.is_file() else {f.resolve() for f in p.rglob("*.py")}
    root = root.resolve()
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


#: gemkd's own top-level packages: their source is in :data:`STEP_CODE` already
OWN_PACKAGES = {"gemkd"}


def plugin_code(class_paths: Iterable[str]) -> dict[str, str]:
    """``class_path`` → hash of the source of the user's package that defines it (every ``.py``
    file under its top-level package, or the module file of a top-level module), for every
    dotted path outside gemkd: a step that runs a user's student, method or teacher is redone
    after the user edits it. Built-in names and gemkd's own classes map to nothing."""
    out = {}
    for path in sorted(set(class_paths)):
        module_name = path.rpartition(".")[0]
        top = module_name.partition(".")[0]
        if not module_name or top in OWN_PACKAGES:
            continue
        module = importlib.import_module(top)  # imported by the checks already
        spec_file = getattr(module, "__file__", None)
        if spec_file is None:  # a namespace package: every folder it spans
            roots = tuple(str(Path(p)) for p in module.__path__)
        else:
            f = Path(spec_file)
            roots = (str(f.parent),) if f.name == "__init__.py" else (str(f),)
        out[path] = source_hash(roots, Path("/"))
    return out


def plugin_key(class_paths: Iterable[str]) -> dict[str, Any]:
    """``{"plugins": plugin_code(...)}`` to merge into a step's key, or nothing when every class
    is gemkd's own (the keys of built-in runs stay as they were)."""
    code = plugin_code(class_paths)
    return {"plugins": code} if code else {}


def config_hash(config: Any) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()
                          ).hexdigest()[:12]


def step_key(name: str, config: Any) -> dict[str, Any]:
    """A step's cache key: its config, the hash of the code it runs and, for every step but the
    data (numpy and pyarrow), this process's torch threads: a teacher, store, domain FM or codes
    computed at another thread count differs in its last bits, which the searches downstream
    amplify into other choices, so a rerun at another ``--threads`` must not reuse it."""
    step = name.split("-")[0]
    key = {"config": config,
           "code": code_hash(step_sources(step if step in STEP_CODE else "students"))}
    if step != "data":
        import torch

        key["threads"] = torch.get_num_threads()
    return key


def cached_step(cache: Path, name: str, config: Any, run: Callable[[Path], None],
                log: StepLog | Callable[[str], None] = print) -> Path:
    """Run ``run(step_dir)`` unless a finished step with the same config and code exists;
    ``log`` hears of it (and, a :class:`~gemkd.experiments.run.progress.StepLog` such as the run's
    progress, counts the step done either way)."""
    log = step_log(log)
    key = step_key(name, config)
    step = cache / f"{name}-{config_hash(key)}"
    done = step / "DONE"
    if done.is_file():
        log(f"[cached] {name} ({step.name})")
        log.step_done(name)
        return step
    step.mkdir(parents=True, exist_ok=True)
    (step / "config.json").write_text(json.dumps(key, indent=2, sort_keys=True, default=str))
    log(f"[run] {name} ({step.name})")
    try:
        run(step)
    except BaseException:
        _drop_if_empty(step)
        raise
    done.write_text("ok\n")
    log.step_done(name)
    return step


def _drop_if_empty(step: Path) -> None:
    """A step that failed before writing anything but its config has nothing to resume: remove
    it rather than leave a folder that looks like work. Anything else (a checkpoint, a partial
    store) stays for the rerun to resume."""
    files = [p for p in step.rglob("*") if p.is_file()]
    if all(p.name in CONFIG_FILES for p in files):
        shutil.rmtree(step, ignore_errors=True)

