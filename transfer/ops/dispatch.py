"""The public jagged ops: validate once, then run the PyTorch reference or the Triton kernel.

Every op takes ``kernel="auto" | "torch" | "triton"`` (DESIGN §7). ``"auto"`` picks Triton for
CUDA tensors when triton is importable and the reference otherwise. ``"triton"`` on CPU tensors
runs the Triton *interpreter* and is only allowed when ``TRITON_INTERPRET=1`` was set before
triton was imported (it is a testing tool, orders of magnitude slower than the reference).
Degenerate shapes (no segments, no values, no features) always take the reference, which handles
them without launching anything.

Validation is host-side metadata only (ndim, dtype, shape, device): nothing here reads tensor
contents, so no call synchronises with the device. In particular ``offsets`` is *trusted* to
start at 0, end at N and never decrease; a violation gives wrong results, not an error.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import operator
import os
from typing import Any

import torch
from torch import Tensor

from gemkd.transfer.ops import jagged_reference as reference
from gemkd.transfer.options import KERNELS  # the one list: options.Kernel

__all__ = [
    "KERNELS",
    "interpret_mode",
    "jagged_target_attention",
    "jagged_to_padded",
    "lengths_to_mask",
    "padded_to_jagged",
    "segment_max",
    "segment_mean",
    "segment_sum",
    "select_kernel",
    "triton_available",
]


@functools.cache
def triton_available() -> bool:
    """True when ``import triton`` works (checked once per process)."""
    if importlib.util.find_spec("triton") is None:
        return False
    try:
        import triton  # noqa: F401
    except Exception:  # a broken install is as good as none
        return False
    return True


def interpret_mode() -> bool:
    """True when ``TRITON_INTERPRET`` asks for the Triton interpreter (read at call time)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in {"1", "true", "yes", "on"}


def _interpreter_ready() -> bool:
    """True when triton was imported under ``TRITON_INTERPRET=1`` (imports it if not yet)."""
    import triton.language as tl

    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # a triton without the interpreter module: let the launch decide
        return True
    return isinstance(tl.zeros, InterpretedFunction)


def select_kernel(kernel: str, device: torch.device) -> str:
    """Resolve ``kernel`` for tensors on ``device`` to ``"torch"`` or ``"triton"``."""
    if kernel not in KERNELS:
        valid = ", ".join(repr(k) for k in KERNELS)
        raise ValueError(f"unknown kernel {kernel!r}: expected one of {valid}")
    if kernel == "torch":
        return "torch"
    if kernel == "auto":
        return "triton" if device.type == "cuda" and triton_available() else "torch"
    if not triton_available():
        raise ValueError("kernel='triton' needs the triton package, which cannot be imported here")
    if device.type != "cuda":
        if not interpret_mode():
            raise ValueError(
                f"kernel='triton' on {device.type} tensors needs the Triton interpreter: set the "
                "environment variable TRITON_INTERPRET=1, or use kernel='torch' or 'auto'"
            )
        if not _interpreter_ready():
            raise ValueError(
                "kernel='triton' on CPU: TRITON_INTERPRET=1 is set, but triton was imported "
                "before it was; set it in the environment before the first `import triton`"
            )
    return "triton"


def _triton():
    from gemkd.transfer.ops import triton_kernels

    return triton_kernels


# ---------------------------------------------------------------------------------------------
# validation (metadata only: never reads tensor contents)
# ---------------------------------------------------------------------------------------------


def _check_offsets(offsets: object) -> int:
    if not isinstance(offsets, Tensor):
        raise ValueError(f"offsets must be a torch.Tensor, got {type(offsets).__name__}")
    if offsets.dim() != 1 or offsets.shape[0] < 1:
        raise ValueError(f"offsets must be 1-D of shape [B+1], got shape {tuple(offsets.shape)}")
    if offsets.dtype != torch.int64:
        raise ValueError(f"offsets must be int64, got {offsets.dtype}")
    return offsets.shape[0] - 1


def _check_tensor(
    name: str, x: object, dims: tuple[int, ...], offsets: Tensor, floating: bool
) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in dims:
        want = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"{name} must be {want}, got shape {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.device != offsets.device:
        raise ValueError(f"{name} is on {x.device} but offsets is on {offsets.device}")
    return x


def _check_len(name: str, value: Any) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {type(value).__name__}") from None
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


def _degenerate(*sizes: int) -> bool:
    return any(s == 0 for s in sizes)


def _segment_pool(op: str, values: Tensor, offsets: Tensor, kernel: str) -> Tensor:
    """Validate, then run the reference or the Triton version of the pooling op ``op``."""
    b = _check_offsets(offsets)
    _check_tensor("values", values, (1, 2), offsets, floating=True)
    impl = select_kernel(kernel, values.device)
    if impl == "torch" or _degenerate(b, values.shape[0], _width(values)):
        return getattr(reference, op)(values, offsets)
    return getattr(_triton(), op)(values, offsets)


# ---------------------------------------------------------------------------------------------
# public ops
# ---------------------------------------------------------------------------------------------


def segment_sum(values: Tensor, offsets: Tensor, *, kernel: str = "auto") -> Tensor:
    """Sum of each segment: ``values [N(, D)], offsets [B+1] -> [B(, D)]``, empty → 0.

    Pooling without padding: cost O(N·D) however long the longest sequence is. Triton
    backward: a broadcast kernel.
    """
    return _segment_pool("segment_sum", values, offsets, kernel)


def segment_mean(values: Tensor, offsets: Tensor, *, kernel: str = "auto") -> Tensor:
    """Mean of each segment: ``[N(, D)] -> [B(, D)]``; an empty segment gives 0, not NaN.

    Triton backward: a broadcast kernel scaled by 1/length.
    """
    return _segment_pool("segment_mean", values, offsets, kernel)


def segment_max(values: Tensor, offsets: Tensor, *, kernel: str = "auto") -> Tensor:
    """Elementwise max of each segment: ``[N(, D)] -> [B(, D)]``; an empty segment gives 0.

    The gradient goes to the (first) argmax element of each segment and column only. Triton
    backward: a torch ``scatter`` to the argmax rows the forward kernel saved (no kernel needed).
    NaN inputs are unsupported.
    """
    return _segment_pool("segment_max", values, offsets, kernel)


def jagged_to_padded(
    values: Tensor,
    offsets: Tensor,
    max_len: int,
    padding_value: float = 0.0,
    *,
    kernel: str = "auto",
) -> Tensor:
    """Pad on the device: ``values [N(, D)] -> [B, max_len(, D)]`` filled with ``padding_value``.

    A segment longer than ``max_len`` keeps its first ``max_len`` values (as fbgemm does);
    callers pass the batch's own max length (``Batch.seq_max_len``, a host int: no sync).
    Works for integer values too (e.g. event ids); gradients flow for float values. Triton
    backward: the padded→jagged kernel.
    """
    b = _check_offsets(offsets)
    _check_tensor("values", values, (1, 2), offsets, floating=False)
    max_len = _check_len("max_len", max_len)
    impl = select_kernel(kernel, values.device)
    if (
        impl == "torch"
        or values.dtype == torch.bool
        or _degenerate(b, values.shape[0], max_len, _width(values))
    ):
        return reference.jagged_to_padded(values, offsets, max_len, padding_value)
    return _triton().jagged_to_padded(values, offsets, max_len, padding_value)


def padded_to_jagged(
    padded: Tensor, offsets: Tensor, total_len: int | None = None, *, kernel: str = "auto"
) -> Tensor:
    """Inverse of ``jagged_to_padded``: ``padded [B, L(, D)] -> [N(, D)]``.

    ``total_len`` is N; pass it (e.g. ``values.shape[0]``) in hot paths, since leaving it
    ``None`` reads ``offsets[-1]``, one host sync. Positions of a segment at or past ``L``
    (truncated when padded) come back as 0. Triton backward: the jagged→padded kernel.
    """
    b = _check_offsets(offsets)
    _check_tensor("padded", padded, (2, 3), offsets, floating=False)
    if padded.shape[0] != b:
        raise ValueError(
            f"padded has {padded.shape[0]} rows but offsets describes {b} segments "
            f"(shape {tuple(offsets.shape)})"
        )
    impl = select_kernel(kernel, padded.device)
    n = int(offsets[-1]) if total_len is None else _check_len("total_len", total_len)
    if (
        impl == "torch"
        or padded.dtype == torch.bool
        or _degenerate(b, n, padded.shape[1], math.prod(padded.shape[2:]))
    ):
        return reference.padded_to_jagged(padded, offsets, n)
    return _triton().padded_to_jagged(padded, offsets, n)


def lengths_to_mask(offsets: Tensor, max_len: int, *, kernel: str = "auto") -> Tensor:
    """``bool [B, max_len]``, True where the position holds an event of the segment.

    One fused comparison in torch on every backend (a kernel would not be faster); ``kernel``
    is validated for a uniform API.
    """
    _check_offsets(offsets)
    max_len = _check_len("max_len", max_len)
    select_kernel(kernel, offsets.device)
    return reference.lengths_to_mask(offsets, max_len)


def jagged_target_attention(
    query: Tensor,
    keys: Tensor,
    values: Tensor,
    offsets: Tensor,
    scale: float | None = None,
    *,
    kernel: str = "auto",
) -> Tensor:
    """Target-attention pooling (DIN / LoopFM): per segment ``softmax(q·Kᵀ·scale) V``.

    ``query [B, D]`` (the candidate ad), ``keys [N, D]`` and ``values [N, Dv]`` (the user's
    events) -> ``[B, Dv]``. ``scale`` defaults to ``1/sqrt(D)``. Max-subtracted softmax with
    float32 accumulators for fp16/bf16 inputs; an empty segment pools to zeros. Triton: an
    online-softmax kernel, one program per segment; backward: one fused kernel giving dq, dk
    and dv, recomputing the probabilities from the saved log-sum-exp.
    """
    b = _check_offsets(offsets)
    _check_tensor("query", query, (2,), offsets, floating=True)
    _check_tensor("keys", keys, (2,), offsets, floating=True)
    _check_tensor("values", values, (2,), offsets, floating=True)
    if query.shape[0] != b:
        raise ValueError(f"query has {query.shape[0]} rows but offsets describes {b} segments")
    if keys.shape[1] != query.shape[1]:
        raise ValueError(
            f"keys have dimension {keys.shape[1]} but query has dimension {query.shape[1]}"
        )
    if keys.shape[0] != values.shape[0]:
        raise ValueError(f"keys have {keys.shape[0]} rows but values have {values.shape[0]}")
    if not (query.dtype == keys.dtype == values.dtype):
        raise ValueError(
            "query, keys and values must share a dtype, got "
            f"{query.dtype}, {keys.dtype}, {values.dtype}"
        )
    scale = 1.0 / math.sqrt(max(query.shape[1], 1)) if scale is None else float(scale)
    impl = select_kernel(kernel, query.device)
    if impl == "torch" or _degenerate(b, keys.shape[0], query.shape[1], values.shape[1]):
        return reference.jagged_target_attention(query, keys, values, offsets, scale)
    return _triton().jagged_target_attention(query, keys, values, offsets, scale)


def _width(x: Tensor) -> int:
    """Feature width of ``[N]`` (1) or ``[N, D]`` (D) values."""
    return 1 if x.dim() == 1 else x.shape[1]
