"""Reading a run's per-user evaluation files, ``clusters/world={w}/lag={L}/{name}.npz`` (the
folders found by :meth:`gemkd.experiments.run_dir.RunDir.eval_folders`).

One file per final student run (``{variant}__seed{seed}``) and per teacher source
(``teacher__gem``, ``teacher__domain_fm``), each holding per (user, domain) cluster sums of the
evaluation (gemkd.transfer.metrics.clusters). The files of one folder describe one evaluation set,
so their rows must match exactly: that is what makes the bootstrap paired, and any mismatch is a
ConfigError naming the file rather than an interval over two different data sets.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gemkd.experiments.run_dir import RunDir
from gemkd.experiments.run_dir.results_schema import ALL
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.metrics.bootstrap import WorldSums, ne_point

log = logging.getLogger(__name__)

CLUSTERS = RunDir.CLUSTERS
GEM = "gem"
#: The arrays of a clusters/*.npz file (a fit's log loss summed per user and domain)
CLUSTER_ARRAYS = ("user_id", "domain", "loss", "n", "pos", "tasks", "domains", "base_rate")
_STUDENT = re.compile(r"^(?P<variant>.+)__seed(?P<seed>-?\d+)$")
_TEACHER = re.compile(r"^teacher__(?P<source>.+)$")


@dataclass(frozen=True, eq=False)
class EvalSet:
    """The arms evaluated on one world's data at one teacher lag: ``students[i]`` is arm i's
    (variant, seed), ``teachers[j]`` arm ``len(students) + j``'s source."""

    world: int
    lag: int | float
    tasks: list[str]
    domains: list[str]
    students: list[tuple[str, int]]
    teachers: list[str]
    sums: WorldSums

    @property
    def groups(self) -> list[str]:
        """Names of the NE domain axis: each domain, then all (a single-domain dataset's one
        domain may itself be named all)."""
        return [*self.domains, ALL]

    def teacher_arm(self, source: str = GEM) -> int | None:
        return len(self.students) + self.teachers.index(source) if source in self.teachers \
            else None


def has_clusters(run_dir: str | Path | RunDir) -> bool:
    """Does the run keep per-user evaluation files (the oldest runs do not)?"""
    return _run(run_dir).has_clusters()


def load_eval_sets(run_dir: str | Path | RunDir) -> list[EvalSet]:
    """Every ``world=…/lag=…`` folder of the run, sorted by lag then world."""
    sets = []
    for world, lag, folder in _run(run_dir).eval_folders():
        found = load_folder(folder, world, lag)
        if found is not None:
            sets.append(found)
    return sorted(sets, key=lambda s: (s.lag, s.world))


def _run(run_dir: str | Path | RunDir) -> RunDir:
    return run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)


def load_folder(folder: Path, world: int, lag: int | float) -> EvalSet | None:
    """One evaluation set; None when the folder holds no student file."""
    students: list[tuple[tuple[str, int], dict[str, np.ndarray]]] = []
    teachers: list[tuple[str, dict[str, np.ndarray]]] = []
    for path in sorted(folder.glob("*.npz")):
        s, t = _STUDENT.match(path.stem), _TEACHER.match(path.stem)
        if s is not None:
            students.append(((s["variant"], int(s["seed"])), _read(path)))
        elif t is not None:
            teachers.append((t["source"], _read(path)))
        else:
            log.warning("%s: name is not <variant>__seed<k> or teacher__<source>; skipped", path)
    if not students:
        return None
    first_name = f"{students[0][0][0]}__seed{students[0][0][1]}"
    ref = students[0][1]
    for name, arrays in ([(f"{v}__seed{s}", a) for (v, s), a in students]
                         + [(f"teacher__{src}", a) for src, a in teachers]):
        _check_paired(folder / f"{name}.npz", arrays, ref, first_name)
    arms = [a for _, a in students] + [a for _, a in teachers]
    sums = WorldSums(user=ref["user_id"].astype(np.int64), domain=ref["domain"].astype(np.int64),
                     loss=np.stack([a["loss"] for a in arms]).astype(np.float64),
                     n=ref["n"].astype(np.float64), pos=ref["pos"].astype(np.float64),
                     base_rate=ref["base_rate"].astype(np.float64),
                     n_domains=len(ref["domains"]))
    return EvalSet(world, lag, [str(t) for t in ref["tasks"]], [str(d) for d in ref["domains"]],
                   [k for k, _ in students], [k for k, _ in teachers], sums)


def _read(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable .npz: {' '.join(str(e).split())}") from None
    missing = [k for k in CLUSTER_ARRAYS if k not in arrays]
    if missing:
        raise ConfigError(f"{path}: missing array {missing[0]!r}; expected "
                          f"{', '.join(CLUSTER_ARRAYS)}")
    c, t = len(arrays["user_id"]), len(arrays["tasks"])
    for key in ("loss", "n", "pos"):
        if arrays[key].shape != (c, t):
            raise ConfigError(f"{path}: array {key!r} has shape {arrays[key].shape}, expected "
                              f"({c}, {t}) (clusters × tasks)")
    if arrays["domain"].shape != (c,) or arrays["base_rate"].shape != (t,):
        raise ConfigError(f"{path}: arrays 'domain' [C] and 'base_rate' [T] do not match "
                          f"'user_id' ({c}) and 'tasks' ({t})")
    return arrays


def _check_paired(path: Path, arrays: dict[str, np.ndarray], ref: dict[str, np.ndarray],
                  ref_name: str) -> None:
    """The same clusters, labels and names as the folder's first file, or a ConfigError."""
    for key in ("tasks", "domains", "user_id", "domain", "n", "pos", "base_rate"):
        a, b = arrays[key], ref[key]
        same = (a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
                if a.dtype.kind == "f" else a.shape == b.shape and np.array_equal(a, b))
        if not same:
            raise ConfigError(f"{path}: array {key!r} differs from {ref_name}.npz in the same "
                              "folder; the files of one folder must describe the same "
                              "evaluation examples")


def point_frame(sets: list[EvalSet]) -> pd.DataFrame:
    """NE of every student arm on its evaluation as it is: columns world, teacher_lag_days,
    variant, seed, domain, task, ne (comparable row by row with results.csv)."""
    rows = []
    for es in sets:
        ne = ne_point(es.sums)
        for a, (variant, seed) in enumerate(es.students):
            for g, domain in unique_groups(es.groups):
                for t, task in enumerate(es.tasks):
                    rows.append((es.world, es.lag, variant, seed, domain, task, ne[a, g, t]))
    return pd.DataFrame(rows, columns=["world", "teacher_lag_days", "variant", "seed", "domain",
                                       "task", "ne"])


def unique_groups(groups: list[str]) -> list[tuple[int, str]]:
    """(index, name) of each group name once, the last wins: a single domain named all is the
    all-domains sum itself."""
    last = {name: i for i, name in enumerate(groups)}
    return [(i, name) for name, i in last.items()]
