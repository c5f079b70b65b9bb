"""Serving-side cost of transfer: per-request latency of the student with representation
features vs the plain student vs running the GEM teacher itself.

    python -m benchmarks.bench_serving [--json OUT] [--quick] [--threads 1] [--device cpu|cuda]
        [--candidates 100] [--requests 500]

Why: LoopFM-style representation features move teacher knowledge into serving as a lookup; the
question is what that lookup costs next to the student's own forward, and how far it is from
serving the teacher instead. A request is one user at one time with N candidate ads (the rows
of N impressions of the world's second half, their user-side fields and history replaced by the
first row's user's, as a ranking call scores every (user, ad) pair). Three paths, each in
``torch.inference_mode`` with models in eval mode, per request:

* ``student``: the quickstart ``mlp`` student's forward (no representation features);
* ``student+repr``: the repr method's features (``AsOfCodes.lookup`` of the user's codes
  strictly before the request, ``pool_mean``) then the same student built with
  ``repr_dim = code_dim``;
* ``student+solaris``: SOLARIS's pair features (``PairLookup.lookup`` of each (day, user, ad) in a
  pair store, the user's mean vector and a miss flag on a miss) then the student built with
  ``repr_dim = trunk_dim + 1``; the store holds every other candidate of each request (a hit rate
  of one half) and K = 8 pairs of each other user of the world, random vectors of the teacher's
  ``trunk_dim``: the precomputed pair representation in place of the teacher's forward;
* ``teacher``: ``GEM`` with ``experiments/teacher/configs/small.yaml``'s model, its history
  capped at the quickstart teacher's ``max_seq_len`` (256), repeated per candidate.

Weights are untrained (latency does not depend on their values). The code store holds one int8
code (``code_dim`` 8, the quickstart's ``repr``) per example of the world, written by
``write_code_store`` from random tanh codes, as ``build_codes`` would from the teacher's. Each
request's host→device copy counts (``--device cuda``). Requests run once each on every path,
interleaved, after ``--warmup`` untimed requests; p50 and p99 over ``--requests``.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import yaml

from benchmarks.common import (
    add_common_args,
    apply_common_args,
    figure,
    print_figures,
    sync,
    write_json,
)
from gemkd.experiments.spec import load_spec
from gemkd.students import build_student
from gemkd.teachers import GEM
from gemkd.transfer.config import load_dataclass
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.synth import SynthConfig, generate
from gemkd.transfer.repr_features import (
    AsOfCodes,
    CodeStore,
    pool_mean,
    quantize_codes,
    write_code_store,
)
from gemkd.transfer.solaris.lookup import PairLookup

ROOT = Path(__file__).resolve().parents[1]
USER_FIELDS = ("user_id", "age_bucket", "country", "device")  # request-level categoricals
PATHS = ("student", "student+repr", "student+solaris", "teacher")
ITEM = "ad_id"  # the synthetic world's item column (SOLARIS pairs are (user, ad))
PAIRS_PER_USER = 8  # solaris.k of the shipped specs


def write_codes(data: Path, out: Path, code_dim: int, bits: int) -> None:
    """One random tanh code per example of the world, through the real code-store writer."""
    keys: dict[str, list[np.ndarray]] = {k: [] for k in ("example_id", "user_id", "ts", "day")}
    reader = DatasetReader(data, batch_size=1 << 16, dense=[], sequence=[], oracle=False)
    for b in reader:
        for k in keys:
            keys[k].append(getattr(b, k).numpy())
    cols = {k: np.concatenate(v) for k, v in keys.items()}
    rng = np.random.default_rng(0)
    codes = np.tanh(rng.standard_normal((len(cols["example_id"]), code_dim), dtype=np.float32))
    write_code_store(out, cols["example_id"], cols["user_id"], cols["ts"], cols["day"],
                     quantize_codes(codes, bits), bits, code_dim, {"teacher_version": "bench"})


def make_requests(data: Path, days: tuple[int, int], n_candidates: int, n_requests: int,
                  max_seq_len: int) -> list[Batch]:
    """Requests of one user (the first row's) and ``n_candidates`` ads, on the host."""
    reader = DatasetReader(data, days=days, batch_size=n_candidates, max_seq_len=max_seq_len)
    cat_names = [f.name for f in reader.schema.categorical]
    user_cols = [cat_names.index(n) for n in USER_FIELDS if n in cat_names]
    out = []
    for b in reader:
        if len(b) < n_candidates:
            continue
        n = len(b)
        length = int(b.seq_offsets[1])
        cat = b.categorical.clone()
        cat[:, user_cols] = b.categorical[0, user_cols]
        out.append(dataclasses.replace(
            b, categorical=cat,
            seq_values={k: v[:length].repeat(n) for k, v in b.seq_values.items()},
            seq_offsets=torch.arange(n + 1, dtype=torch.int64) * length, seq_max_len=length,
            user_id=_first(b.user_id, n), ts=_first(b.ts, n), day=_first(b.day, n),
            domain=_first(b.domain, n)))
        if len(out) == n_requests:
            break
    return out


def pair_lookup(requests: list[Batch], item_col: int, n_users: int, n_items: int, dim: int
                ) -> PairLookup:
    """A pair store holding every other candidate of each request and ``PAIRS_PER_USER``
    random (day, user, ad) pairs of every user of the world (random vectors)."""
    rng = np.random.default_rng(0)
    keys: set[tuple[int, int, int]] = set()
    for r in requests:
        day, user = int(r.day[0]), int(r.user_id[0])
        keys |= {(day, user, int(a)) for a in r.categorical[::2, item_col].tolist()}
    days = sorted({k[0] for k in keys})
    for day in days:
        for user in range(n_users):
            keys |= {(day, user, int(a)) for a in rng.integers(0, n_items, PAIRS_PER_USER)}
    d, u, i = (np.array(c, dtype=np.int64) for c in zip(*sorted(keys), strict=True))
    vectors = rng.standard_normal((len(d), dim), dtype=np.float32)
    return PairLookup(d, u, i, vectors, fallback="user_mean")


def _first(x: torch.Tensor, n: int) -> torch.Tensor:
    """Row 0 of ``x`` repeated ``n`` times."""
    return x[:1].expand(n, *x.shape[1:]).contiguous()


def percentile_ms(times: list[float], q: float) -> float:
    return float(np.percentile(np.array(times) * 1e3, q))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p, device=True)
    p.add_argument("--candidates", type=int, default=100, help="candidate ads per request")
    p.add_argument("--requests", type=int, default=None, help="default 500 (50 with --quick)")
    p.add_argument("--warmup", type=int, default=10, help="untimed requests first")
    args = p.parse_args()
    apply_common_args(p, args)
    n_requests = args.requests or (50 if args.quick else 500)
    dev = torch.device(args.device)
    spec = load_spec(None)
    preset = "tiny" if args.quick else (spec.data.preset or "small")
    code_dim, bits = spec.repr.code_dim, spec.repr.bits
    teacher_cap = int(spec.teacher.overrides.get("max_seq_len") or 256)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_serving-") as tmp:
        data, codes_dir = Path(tmp) / "data", Path(tmp) / "codes"
        schema = generate(load_dataclass(SynthConfig, ROOT / "experiments/data" / f"{preset}.yaml"),
                          data)
        write_codes(data, codes_dir, code_dim, bits)
        days = (schema.days[len(schema.days) // 2], schema.days[-1] + 1)  # long as-of histories
        requests = make_requests(data, days, args.candidates, n_requests + args.warmup,
                                 teacher_cap)
        asof = AsOfCodes(CodeStore(codes_dir), spec.repr.max_events)

        def codes(req: Batch) -> torch.Tensor:  # what the repr method feeds a student
            return pool_mean(*asof.lookup(req.user_id, req.ts))

        tasks = list(spec.student_tasks)
        init = dict(spec.student.init_args)
        torch.manual_seed(0)
        plain = build_student({"class_path": spec.student.class_path, "init_args": init},
                              schema, tasks).to(dev).eval()
        with_repr = build_student({"class_path": spec.student.class_path,
                                   "init_args": {**init, "repr_dim": asof.code_dim}},
                                  schema, tasks).to(dev).eval()
        gem_cfg = yaml.safe_load(
            (ROOT / "experiments/teacher/configs/small.yaml").read_text())["model"]
        teacher = GEM.from_config(schema, gem_cfg).to(dev).eval()
        item_col = [f.name for f in schema.categorical].index(ITEM)
        cards = {f.name: f.cardinality for f in schema.categorical}
        pairs = pair_lookup(requests, item_col, cards["user_id"], cards[ITEM],
                            int(gem_cfg["trunk_dim"]))
        with_pairs = build_student({"class_path": spec.student.class_path,
                                    "init_args": {**init, "repr_dim": pairs.dim + 1}},
                                   schema, tasks).to(dev).eval()

        def pair_features(req: Batch) -> torch.Tensor:  # what the solaris method feeds a student
            return pairs.lookup(req.day, req.user_id, req.categorical[:, item_col])

        def student(req: Batch) -> None:
            plain(req.to(dev))

        def student_repr(req: Batch) -> None:
            feats = codes(req)  # host-side lookup on the request's user_id / ts
            with_repr(req.to(dev), feats.to(dev))

        def student_solaris(req: Batch) -> None:
            feats = pair_features(req)  # host-side lookup of the request's (day, user, ad)
            with_pairs(req.to(dev), feats.to(dev))

        def gem(req: Batch) -> None:
            teacher(req.to(dev))

        times = run_requests({"student": student, "student+repr": student_repr,
                              "student+solaris": student_solaris, "teacher": gem},
                             requests, args.warmup, args.device)
        lookup = run_requests({"lookup": lambda r: codes(r),
                               "pair_lookup": lambda r: pair_features(r)},
                              requests, args.warmup, "cpu")
        hit_rate = float(np.mean([1.0 - float(pair_features(r)[:, -1].mean())
                                  for r in requests]))
        n_codes = [int(asof.lookup(r.user_id[:1], r.ts[:1])[1][-1]) for r in requests]
        hist = [r.seq_max_len for r in requests]
    res = {
        "candidates": args.candidates, "requests": len(requests) - args.warmup,
        "threads": torch.get_num_threads(), "preset": preset, "teacher_history_cap": teacher_cap,
        "mean_history": round(float(np.mean(hist)), 1),
        "mean_codes_per_user": round(float(np.mean(n_codes)), 1),
        "pair_store_pairs": len(pairs.vectors), "pair_hit_rate": round(hit_rate, 3),
        "teacher_params_m": round(teacher.num_parameters() / 1e6, 2),
        "student_params_k": round(sum(q.numel() for q in with_repr.parameters()) / 1e3, 1),
        "latency_ms": {k: {"p50": percentile_ms(v, 50), "p99": percentile_ms(v, 99)}
                       for k, v in {**times, **lookup}.items()},
        "total_seconds": round(time.perf_counter() - t_start, 1),
    }
    figs = figures(res, args.device)
    print(f"serving: {res['requests']} requests x {args.candidates} candidates ({preset} world, "
          f"mean history {res['mean_history']}, mean {res['mean_codes_per_user']} as-of codes "
          f"per request), {res['threads']} threads, {args.device}; total {res['total_seconds']} s")
    print_figures(figs)
    write_json(args.json, {"bench": "serving", "quick": args.quick, "device": args.device,
                           **res, "figures": figs})


@torch.inference_mode()
def run_requests(paths: dict[str, Callable[[Batch], object]], requests: list[Batch], warmup: int,
                 device: str) -> dict[str, list[float]]:
    """Seconds per request on each path; every request visits every path in turn."""
    times: dict[str, list[float]] = {k: [] for k in paths}
    for i, req in enumerate(requests):
        for name, fn in paths.items():
            sync(device)
            t0 = time.perf_counter()
            fn(req)
            sync(device)
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    return times


def figures(r: dict, device: str) -> list[dict]:
    lat, n = r["latency_ms"], r["candidates"]
    out = []
    alone = {"lookup": "code lookup + pooling alone", "pair_lookup": "pair-store lookup alone"}
    for path in (*PATHS, *alone):
        what = alone.get(path, path)
        for q in ("p50", "p99"):
            out.append(figure(f"serving latency, {what}, 1 request x {n} ads, {q} ({device})",
                              lat[path][q], "ms"))
    for q in ("p50", "p99"):
        out.append(figure(f"serving {q}: student+repr ÷ student (cost of repr features)",
                          lat["student+repr"][q] / lat["student"][q]))
        out.append(figure(f"serving {q}: GEM teacher ÷ student+repr",
                          lat["teacher"][q] / lat["student+repr"][q]))
        out.append(figure(f"serving {q}: student+solaris ÷ student (cost of SOLARIS pair "
                          "features)", lat["student+solaris"][q] / lat["student"][q]))
        out.append(figure(f"serving {q}: GEM teacher ÷ student+solaris (the forward a pair "
                          "store replaces)", lat["teacher"][q] / lat["student+solaris"][q]))
    return out


if __name__ == "__main__":
    main()
