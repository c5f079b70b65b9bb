"""Counting what one training step dispatches: aten ops on the CPU (all, top-level, per phase and
per model part), GPU kernels, host↔device copies and synchronisations (bench_step_ops' units).

Why counts and not only times: a GEM step at B=512 is launch-bound: its time on a GPU
follows the number of kernels, not the FLOPs, and the number of aten ops a step dispatches on the
CPU is the same figure measured without a GPU. The counts come from one ``torch.profiler`` trace
of one step (after warm-up steps): they do not depend on the machine's load.

Attribution: the model's parts (``embeddings``, ``pyramid``, ``cross``, ``wukong``, ...) are
wrapped in ``record_function`` ranges for the traced step only (:func:`annotate`); a backward op
belongs to the part whose forward op made its autograd node (the node's ``sequence_nr``). The
embedding lookups are counted apart (another change, the fused table-batched lookup, owns them).
"""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

PREFIX = "gemkd.part::"
#: phases of a step, each a ``gemkd.phase::<name>`` record_function range (:func:`phase`)
PHASES = ("forward", "loss", "backward", "clip", "optimizer")
#: GEM's parts: (attribute, methods wrapped) — methods other than ``forward`` are called
#: directly by GEM.forward (``embeddings.tokens``), so module hooks would not see them
PARTS: dict[str, tuple[str, ...]] = {
    "embeddings": ("tokens", "events"),
    "pyramid": ("segments", "tokens", "forward"),
    "cross": ("forward",),
    "wukong": ("forward",),
    "final_summary": ("forward",),
    "trunk": ("forward",),
    "heads": ("forward",),
}


def phase(name: str) -> record_function:
    """The range that marks one phase of a step (:data:`PHASES`)."""
    return record_function("gemkd.phase::" + name)


def _wrap(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with record_function(PREFIX + label):
            return fn(*args, **kwargs)

    return run


@contextlib.contextmanager
def annotate(model: nn.Module) -> Iterator[None]:
    """Wrap each part of ``model`` (:data:`PARTS`) in a named ``record_function`` range while
    the context is open (instance attributes shadowing the class's methods; removed on exit)."""
    patched: list[tuple[nn.Module, str]] = []
    try:
        for part, methods in PARTS.items():
            obj = getattr(model, part, None)
            mods = list(obj) if isinstance(obj, nn.ModuleList) else [obj]
            for m in mods:
                if not isinstance(m, nn.Module):
                    continue
                for name in methods:
                    if hasattr(type(m), name) and name not in vars(m):
                        setattr(m, name, _wrap(getattr(m, name), part))
                        patched.append((m, name))
        yield
    finally:
        for m, name in patched:
            delattr(m, name)


#: aten ops that launch no kernel: views, metadata and allocation (``kernel_like`` leaves them out)
NO_KERNEL = frozenset("aten::" + n for n in (
    "view", "_unsafe_view", "as_strided", "transpose", "t", "mT", "expand", "slice", "select",
    "narrow", "unsqueeze", "squeeze", "permute", "reshape", "flatten", "split", "split_with_sizes",
    "chunk", "unbind", "detach", "alias", "resolve_conj", "resolve_neg", "empty", "empty_like",
    "empty_strided", "lift_fresh", "to", "contiguous", "numpy_T", "unflatten", "view_as",
    "expand_as", "new_empty", "new_empty_strided", "result_type", "is_nonzero", "_reshape_alias",
    "set_", "scalar_tensor"))


#: aten ops that run a kernel of their own besides any they dispatch (a GEMM after copying its
#: bias in, flash attention after preparing its mask)
OWN_KERNEL = frozenset("aten::" + n for n in (
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward", "linalg_vector_norm",
    "_embedding_bag", "_embedding_bag_backward", "_embedding_bag_dense_backward",
    "embedding_dense_backward", "native_layer_norm", "native_layer_norm_backward"))


def _kernel_like(aten: list[FunctionEvent]) -> list[FunctionEvent]:
    """The aten ops that would each be a kernel launch: not a view, metadata or allocation op
    (:data:`NO_KERNEL`), and either innermost among such ops or one of :data:`OWN_KERNEL`."""
    computing = [e for e in aten if e.name not in NO_KERNEL]
    has_inner = {id(q) for e in computing for q in _ancestors(e)}
    return [e for e in computing if id(e) not in has_inner or e.name in OWN_KERNEL]


def _ancestors(e: FunctionEvent) -> Iterator[FunctionEvent]:
    q = e.cpu_parent
    while q is not None:
        yield q
        q = q.cpu_parent


def _label(e: FunctionEvent, prefix: str) -> str | None:
    """The innermost enclosing range (``e`` itself included) whose name starts with ``prefix``."""
    for q in (e, *_ancestors(e)):
        if q.name.startswith(prefix):
            return q.name[len(prefix):]
    return None


def count_events(events: list[FunctionEvent]) -> dict[str, Any]:
    """Counts of one traced step: ``aten_ops`` (every aten op, nested ones included),
    ``top_level`` (aten ops called from Python, the autograd engine or the optimizer, not from
    inside another aten op), ``kernel_like`` (innermost aten ops that are not views, metadata or
    allocation: on the CPU, the count a GPU's kernel count follows), ``by_phase`` and
    ``by_part`` (all aten ops; backward ops under their forward part's name + ``.backward``;
    ``kernel_like_by_part`` the same for the kernel-like ones), ``top_ops`` (the most frequent
    top-level ops), ``host_reads`` (values read on the host outside the optimizer: ``.item()``,
    ``int(t)``, ...; each a synchronisation on a GPU), and on a GPU ``kernels``,
    ``h2d``/``d2h``/``d2d`` copies and ``syncs`` (stream/device/event synchronisations and
    blocking copies the host waited on)."""
    aten = [e for e in events if e.name.startswith("aten::")]
    top = [e for e in aten if not any(q.name.startswith("aten::") for q in _ancestors(e))]
    kernel_like = _kernel_like(aten)
    # forward part of each autograd node (sequence_nr), from the forward ops that recorded it
    node_part: dict[int, str] = {}
    for e in aten:
        part = _label(e, PREFIX)
        if part is not None and e.sequence_nr >= 0 and _label(e, "gemkd.phase::") == "forward":
            node_part.setdefault(e.sequence_nr, part)
    by_phase: collections.Counter[str] = collections.Counter()
    by_part: collections.Counter[str] = collections.Counter()
    kernel_like_by_part: collections.Counter[str] = collections.Counter()
    kernel_ids = {id(e) for e in kernel_like}
    for e in aten:
        phase = _label(e, "gemkd.phase::") or "other"
        by_phase[phase] += 1
        if phase == "forward":
            part = _label(e, PREFIX) or "model (glue)"
        elif phase == "backward":
            node = next((q for q in (e, *_ancestors(e))
                         if q.name.startswith("autograd::engine::evaluate_function")), None)
            part = (node_part.get(node.sequence_nr) if node is not None else None) \
                or "model (glue)"
            part += ".backward"
        else:
            continue
        by_part[part] += 1
        kernel_like_by_part[part] += id(e) in kernel_ids
    out: dict[str, Any] = {
        "aten_ops": len(aten), "top_level": len(top), "kernel_like": len(kernel_like),
        "kernel_like_by_phase": dict(collections.Counter(
            _label(e, "gemkd.phase::") or "other" for e in kernel_like)),
        "by_phase": {p: by_phase[p] for p in (*PHASES, "other") if by_phase[p]},
        "by_part": dict(sorted(by_part.items(), key=lambda kv: -kv[1])),
        "kernel_like_by_part": dict(sorted(kernel_like_by_part.items(), key=lambda kv: -kv[1])),
        "top_ops": dict(collections.Counter(e.name for e in top).most_common(12)),
        # a tensor's value read on the host (.item(), int(t), float(t), bool(t)): a sync on a
        # GPU. Not the optimizer's: torch's (non-capturable) Adam keeps its step count on the
        # host and reads it there, no sync
        "host_reads": sum(1 for e in aten if e.name == "aten::_local_scalar_dense"
                          and _label(e, "gemkd.phase::") not in (None, "optimizer")),
    }
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    if kernels:
        def copies(kind: str) -> int:
            return sum(1 for e in kernels if "Memcpy" in e.name and kind in e.name)

        out["kernels"] = sum(1 for e in kernels
                             if "Memcpy" not in e.name and "Memset" not in e.name)
        out["h2d"], out["d2h"], out["d2d"] = copies("HtoD"), copies("DtoH"), copies("DtoD")
        out["syncs"] = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CPU
                           and ("Synchronize" in e.name or e.name == "cudaMemcpy")
                           and _label(e, "gemkd.phase::") is not None)
    return out


def trace(step: Callable[[], object], device: str, warmup: int = 2) -> list[FunctionEvent]:
    """The profiler's events of one call of ``step`` after ``warmup`` untraced calls."""
    for _ in range(warmup):
        step()
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        step()
        if device == "cuda":
            torch.cuda.synchronize()
    return list(prof.events())
