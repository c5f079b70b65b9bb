"""How transfer changes as the teacher knows more: the student's data fixed, the teacher's
grown (``make scaling``; docs/results/SCALING.md).

    python -m studies.scaling_study --config studies/scaling.yaml --threads 1 --workers 2

The config (``studies/scaling.yaml``) names a base spec, the ``--set`` overrides every point
shares, and the points: the days ``D`` of every domain the streaming teacher learns from, ending
where the student's days begin (``teacher_stream_start = teacher_days - D``: every point's
teacher is as old as the others, it has seen more history). Each point is one ``gemkd run`` into
``OUT/d<D>`` and its ``gemkd report`` (report.md, intervals.csv); every step is cached by the
run directory, so a rerun only reports. Then the study reads the run directories
(:mod:`studies.scaling_points`), checks that the student's rows are the same at every point,
measures the rank agreement of the methods between the smallest and the largest point
(:mod:`studies.scaling_rank`) and writes the page and its plots
(:mod:`studies.scaling_render`). ``--report-only`` skips the runs (every point must have run).
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from gemkd.transfer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
#: Keys every point sets itself (from the point's D); the config's ``sets`` may not.
POINT_KEYS = ("name", "teacher_stream_start", "teacher_window_days", "teacher_protocol")


@dataclasses.dataclass(frozen=True)
class ScalingConfig:
    """The study: ``base`` spec, shared ``sets``, the points' ``teacher_days`` (D, ascending),
    ``window_cap`` (the domain FMs' and codes' window is min(D, cap)), and where it writes."""

    path: Path
    base: Path
    teacher_days: tuple[int, ...]
    window_cap: int
    sets: dict[str, Any]
    out: Path
    markdown: Path
    name: str = "scaling"

    @property
    def end(self) -> int:
        """T: the day the teacher's days end and the student's begin (``sets.teacher_days``)."""
        return int(self.sets["teacher_days"])

    def run_dir(self, days: int) -> Path:
        return self.out / f"d{days}"

    def point_sets(self, days: int) -> list[str]:
        """The ``--set key=value`` overrides of the point whose teacher learns from ``days``."""
        sets = dict(self.sets)
        sets["name"] = f"{self.name}_d{days}"  # the point's report is titled by the point
        sets["teacher_protocol"] = "streaming"
        sets["teacher_stream_start"] = self.end - days  # 0 (every day) at D = T
        sets["teacher_window_days"] = min(days, self.window_cap)
        return [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...')}"
                .strip() for k, v in sets.items()]


def _fail(path: Path, key: str, what: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {what}")


def load_config(path: str | Path, root: Path = ROOT) -> ScalingConfig:
    """Read and check a study config; relative paths resolve against ``root`` (the repository).
    A problem is one ConfigError naming the file and the key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such study config") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys, got {type(raw).__name__}")
    known = {"name", "base", "teacher_days", "window_cap", "sets", "out", "markdown"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _fail(path, unknown[0], f"unknown key (known: {', '.join(sorted(known))})")
    for key in ("base", "teacher_days", "sets"):
        if key not in raw:
            raise _fail(path, key, "missing")
    base = root / str(raw["base"])
    if not base.is_file():
        raise _fail(path, "base", f"no spec file {base}")
    days = raw["teacher_days"]
    if (not isinstance(days, list) or len(days) < 2
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in days)):
        raise _fail(path, "teacher_days", f"expected a list of at least two positive whole "
                    f"days, got {days!r}")
    if sorted(set(days)) != days:
        raise _fail(path, "teacher_days", f"expected ascending distinct days, got {days}")
    sets = raw["sets"]
    if not isinstance(sets, dict):
        raise _fail(path, "sets", f"expected a mapping of spec keys, got {sets!r}")
    for key in POINT_KEYS:
        if key in sets:
            raise _fail(path, f"sets.{key}", "set by each point from its teacher_days")
    t = sets.get("teacher_days")
    if not isinstance(t, int) or isinstance(t, bool):
        raise _fail(path, "sets.teacher_days", f"expected the whole day T the students start "
                    f"on, got {t!r}")
    if days[-1] > t:
        raise _fail(path, "teacher_days", f"{days[-1]} days do not fit before sets.teacher_days "
                    f"{t}")
    cap = raw.get("window_cap", days[-1])
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise _fail(path, "window_cap", f"expected a positive whole number of days, got {cap!r}")
    return ScalingConfig(path=path, base=base, teacher_days=tuple(days), window_cap=cap,
                         sets=dict(sets), out=root / str(raw.get("out", "runs/scaling")),
                         markdown=root / str(raw.get("markdown", "docs/results/SCALING.md")),
                         name=str(raw.get("name", "scaling")))


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "gemkd.experiments.cli", *args]


def run_point(cfg: ScalingConfig, days: int, threads: int, workers: int) -> float:
    """``gemkd run`` and ``gemkd report`` of one point (cached: a finished point only reports);
    the wall seconds."""
    start = time.perf_counter()
    out = cfg.run_dir(days)
    cmd = cli("run", str(cfg.base), "--out", str(out), "--threads", str(threads),
              "--workers", str(workers))
    for s in cfg.point_sets(days):
        cmd += ["--set", s]
    print(f"[scaling] D={days}: {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    subprocess.run(cli("report", str(out)), check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def run_order(days: tuple[int, ...]) -> list[int]:
    """The smallest and the largest point first (the rank agreement needs those two), then the
    ones between."""
    return [days[0], days[-1], *days[1:-1]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "studies/scaling.yaml")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--report-only", action="store_true",
                   help="read the points' run directories without running anything")
    p.add_argument("--markdown", type=Path, default=None, help="default: the config's")
    p.add_argument("--command", default=None,
                   help="the command named on the page (default: this one)")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    walls: dict[int, float] = {}
    if not args.report_only:
        for d in run_order(cfg.teacher_days):
            walls[d] = run_point(cfg, d, args.threads, args.workers)
            print(f"[scaling] D={d} done in {walls[d] / 60:.1f} min", flush=True)
    from studies.scaling_render import write_page

    command = args.command or "python -m studies.scaling_study " + " ".join(
        sys.argv[1:] if argv is None else argv)
    try:
        page = write_page(cfg, args.markdown or cfg.markdown, command)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"[scaling] wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
