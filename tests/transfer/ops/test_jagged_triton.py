"""Triton kernels vs the PyTorch reference on CPU, through the Triton interpreter.

The interpreter needs ``TRITON_INTERPRET=1`` before triton is first imported, and a pytest
process running the whole suite has usually imported it already (``import lightning`` does). So
the comparisons here are ``check_*`` functions that this process never collects: the one
``test_interpreted_kernels_match_reference`` runs them in a fresh ``pytest`` subprocess with the
variable set, and reports any failing check with its message. That keeps the interpreter out of
this process too (importing triton under it would turn every later ``triton.jit`` into
interpreted code). To run the checks by hand, with per-check output:

    TRITON_INTERPRET=1 GEMKD_TRITON_WORKER=1 python -m pytest \
        tests/transfer/ops/test_jagged_triton.py -o python_functions='check_*'

Sizes are small: the interpreter runs each program as numpy code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed")

from gemkd.transfer import ops  # noqa: E402
from gemkd.transfer.ops import triton_attention, triton_kernels  # noqa: E402

WORKER_ENV = "GEMKD_TRITON_WORKER"
IN_WORKER = os.environ.get(WORKER_ENV) == "1"
REPO = Path(__file__).resolve().parents[3]


def _triton_is_interpreted() -> bool:
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.zeros, InterpretedFunction)


if IN_WORKER and not _triton_is_interpreted():
    raise RuntimeError(f"{WORKER_ENV}=1 needs TRITON_INTERPRET=1 set before triton is imported")


# ---------------------------------------------------------------------------------------------
# run in this process
# ---------------------------------------------------------------------------------------------


def test_interpreted_kernels_match_reference(tmp_path):
    """Run every ``check_*`` below in a subprocess under the Triton interpreter."""
    report = tmp_path / "checks.xml"
    env = {**os.environ, "TRITON_INTERPRET": "1", WORKER_ENV: "1"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # silence a triton 3.9 deprecation warning
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(Path(__file__).resolve()),
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "python_functions=check_*",
        f"--junitxml={report}",
    ]
    proc = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    output = (proc.stdout + proc.stderr)[-6000:]
    assert report.exists(), f"the checks did not run (exit {proc.returncode}):\n{output}"
    suite = ET.parse(report).getroot().find("testsuite")
    failed = [
        f"{case.get('name')}: {(bad.get('message') or '').splitlines()[0][:300]}"
        for case in suite.iter("testcase")
        for bad in [*case.findall("failure"), *case.findall("error")]
    ]
    assert not failed and proc.returncode == 0, "\n".join(failed) + f"\n\n{output}"
    ran = int(suite.get("tests")) - int(suite.get("skipped"))
    assert ran >= 50, f"only {ran} checks ran:\n{output}"
    print(f"{ran} interpreted checks passed in {float(suite.get('time')):.1f}s")


def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    if _triton_is_interpreted():
        pytest.skip("this process imported triton under TRITON_INTERPRET=1")
    values, off = torch.randn(3, 2), offsets_of([1, 2])
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="needs the Triton interpreter: set .*TRITON_INTERPRET=1"):
        ops.segment_sum(values, off, kernel="triton")
    # setting it now is too late: triton.language was already built for the compiler
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match="before the first `import triton`"):
        ops.segment_sum(values, off, kernel="triton")
    assert ops.select_kernel("auto", torch.device("cpu")) == "torch"


# ---------------------------------------------------------------------------------------------
# compile every kernel for an sm_90 GPU ahead of time: no GPU needed, and it catches what the
# interpreter accepts but the compiler rejects (loop-carried type changes, bad casts, ...)
# ---------------------------------------------------------------------------------------------


def _signatures(p: str, acc: str):
    import triton.language as tl

    acc_tl = tl.float64 if acc == "fp64" else tl.float32
    i64, a = "*i64", f"*{acc}"
    seg = {"MEAN": True, "ACC": acc_tl, "BLOCK_N": 32, "BLOCK_D": 64}
    pad = {"BLOCK_L": 64, "BLOCK_D": 64}
    attn = {"ACC": acc_tl, "BLOCK_N": 64, "BLOCK_D": 64, "BLOCK_DV": 64}
    return {
        "_segment_reduce_kernel": ({"v_ptr": p, "off_ptr": i64, "out_ptr": p, "D": "i32"}, seg),
        "_segment_bcast_kernel": ({"g_ptr": p, "off_ptr": i64, "out_ptr": p, "D": "i32"}, seg),
        "_segment_max_kernel": (
            {"v_ptr": p, "off_ptr": i64, "out_ptr": p, "arg_ptr": i64, "N": "i64", "D": "i32"},
            {k: seg[k] for k in ("ACC", "BLOCK_N", "BLOCK_D")},
        ),
        "_jagged_to_padded_kernel": (
            {"v_ptr": p, "off_ptr": i64, "pad_ptr": p, "out_ptr": p, "L": "i32", "D": "i32"},
            pad,
        ),
        "_padded_to_jagged_kernel": (
            {"p_ptr": p, "off_ptr": i64, "out_ptr": p, "L": "i32", "D": "i32"},
            pad,
        ),
        "_attn_fwd_kernel": (
            {
                "q_ptr": a,
                "k_ptr": p,
                "v_ptr": p,
                "off_ptr": i64,
                "out_ptr": p,
                "lse_ptr": a,
                "D": "i32",
                "DV": "i32",
            },
            attn,
        ),
        "_attn_bwd_kernel": (
            {
                "q_ptr": a,
                "k_ptr": p,
                "v_ptr": p,
                "off_ptr": i64,
                "out_ptr": p,
                "lse_ptr": a,
                "do_ptr": p,
                "dq_ptr": a,
                "dk_ptr": p,
                "dv_ptr": p,
                "D": "i32",
                "DV": "i32",
            },
            attn,
        ),
    }


@pytest.mark.parametrize("dtype,acc", [("bf16", "fp32"), ("fp64", "fp64")])
def test_kernels_compile_for_sm90(dtype, acc, monkeypatch):
    import triton
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if "nvidia" not in backends:
        pytest.skip("triton's NVIDIA backend is not installed")
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # silence a triton 3.9 deprecation warning
    target = GPUTarget("cuda", 90, 32)
    for name, (sig, constexprs) in _signatures(f"*{dtype}", acc).items():
        module = triton_attention if name.startswith("_attn") else triton_kernels
        kernel = getattr(module, name)
        fn = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn)
        sig = {**sig, **dict.fromkeys(constexprs, "constexpr")}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = triton.compile(ASTSource(fn, sig, constexprs=constexprs), target=target)
        assert compiled.asm["cubin"], name


# ---------------------------------------------------------------------------------------------
# checks: run only in the TRITON_INTERPRET=1 subprocess
# ---------------------------------------------------------------------------------------------


def offsets_of(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()])


CASES = {
    "mixed": [3, 0, 5, 1, 0, 33],
    "huge": [2, 300, 0, 1],  # one segment spans ~10 row tiles
    "single": [7],
}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def tol(dtype: torch.dtype) -> dict:
    # bf16: the interpreter rounds float32 -> bfloat16 towards zero (the GPU rounds to
    # nearest), so allow ~2 bf16 ulps
    return {
        torch.float32: {"rtol": 1e-5, "atol": 1e-5},
        torch.float16: {"rtol": 2e-3, "atol": 2e-3},
        torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
        torch.float64: {"rtol": 1e-10, "atol": 1e-10},
    }[dtype]


def run_both(fn, inputs: list[torch.Tensor], seed: int = 0):
    """Forward and backward of ``fn(*inputs, kernel=k)`` for both kernels: [(out, grads)]."""
    results = []
    grad_out = None
    for kernel in ("torch", "triton"):
        xs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
        out = fn(*xs, kernel=kernel)
        if grad_out is None:
            g = torch.Generator().manual_seed(seed)
            grad_out = torch.randn(out.shape, generator=g).to(out.dtype)
        out.backward(grad_out)
        results.append((out.detach(), [x.grad for x in xs if x.requires_grad]))
    return results


def assert_same(results, dtype):
    (ref, ref_grads), (tri, tri_grads) = results
    assert tri.dtype == ref.dtype and tri.shape == ref.shape
    torch.testing.assert_close(tri.double(), ref.double(), **tol(dtype))
    for gt, gr in zip(tri_grads, ref_grads, strict=True):
        assert gt.dtype == gr.dtype
        torch.testing.assert_close(gt.double(), gr.double(), **tol(dtype))


def _randn(*shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("how", ["sum", "mean", "max"])
def check_segment_pooling(how, case, dtype):
    off = offsets_of(CASES[case])
    values = _randn(int(off[-1]), 5, dtype=dtype, seed=1)
    fn = getattr(ops, f"segment_{how}")
    assert_same(run_both(lambda v, kernel: fn(v, off, kernel=kernel), [values]), dtype)


@pytest.mark.parametrize("how", ["sum", "mean", "max"])
def check_segment_pooling_1d_values(how):
    off = offsets_of(CASES["mixed"])
    values = _randn(int(off[-1]), dtype=torch.float32, seed=2)
    fn = getattr(ops, f"segment_{how}")
    assert_same(run_both(lambda v, kernel: fn(v, off, kernel=kernel), [values]), torch.float32)


def check_segment_max_ties_pick_the_first_row():
    values = torch.tensor([[1.0, 2.0], [3.0, 2.0], [3.0, 0.0], [-1.0, -1.0]])
    off = offsets_of([3, 0, 1])
    assert_same(
        run_both(lambda v, kernel: ops.segment_max(v, off, kernel=kernel), [values]),
        torch.float32,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("max_len", [4, 301])
def check_padding_round_trip(case, max_len, dtype):
    off = offsets_of(CASES[case])
    values = _randn(int(off[-1]), 3, dtype=dtype, seed=3)
    assert_same(
        run_both(
            lambda v, kernel: ops.jagged_to_padded(v, off, max_len, -2.0, kernel=kernel), [values]
        ),
        dtype,
    )
    padded = _randn(len(CASES[case]), max_len, 3, dtype=dtype, seed=4)
    n = values.shape[0]
    assert_same(
        run_both(lambda p, kernel: ops.padded_to_jagged(p, off, n, kernel=kernel), [padded]),
        dtype,
    )


def check_padding_1d_and_integer_values():
    off = offsets_of(CASES["mixed"])
    ids = torch.arange(int(off[-1]), dtype=torch.int64) * 3
    for kernel_out in (
        ops.jagged_to_padded(ids, off, 6, -1, kernel="triton"),
        ops.padded_to_jagged(ops.jagged_to_padded(ids, off, 40, -1), off, kernel="triton"),
    ):
        ref = (
            ops.jagged_to_padded(ids, off, 6, -1, kernel="torch") if kernel_out.dim() == 2 else ids
        )
        assert kernel_out.dtype == torch.int64
        assert torch.equal(kernel_out, ref)
    values = _randn(int(off[-1]), dtype=torch.float32, seed=5)
    assert_same(
        run_both(lambda v, kernel: ops.jagged_to_padded(v, off, 10, kernel=kernel), [values]),
        torch.float32,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES)
def check_target_attention(case, dtype):
    lengths = CASES[case]
    off = offsets_of(lengths)
    n = int(off[-1])
    q = _randn(len(lengths), 8, dtype=dtype, seed=6) * 2
    k = _randn(n, 8, dtype=dtype, seed=7)
    v = _randn(n, 5, dtype=dtype, seed=8)
    assert_same(
        run_both(
            lambda q, k, v, kernel: ops.jagged_target_attention(q, k, v, off, kernel=kernel),
            [q, k, v],
        ),
        dtype,
    )


def check_target_attention_large_logits_and_scale():
    off = offsets_of([4, 0, 70])
    q = _randn(3, 6, dtype=torch.float32, seed=9) * 300  # logits in the thousands
    k = _randn(74, 6, dtype=torch.float32, seed=10)
    v = _randn(74, 3, dtype=torch.float32, seed=11)
    res = run_both(
        lambda q, k, v, kernel: ops.jagged_target_attention(q, k, v, off, 0.7, kernel=kernel),
        [q, k, v],
    )
    assert torch.isfinite(res[1][0]).all()
    assert_same(res, torch.float32)


def check_gradcheck_through_kernels_float64():
    """float64 inputs accumulate in float64 in the kernels too, so gradcheck applies."""
    off = offsets_of([2, 0, 3])
    g = torch.Generator().manual_seed(12)
    q = torch.randn(3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(5, 2, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: ops.jagged_target_attention(q, k, v, off, kernel="triton"), (q, k, v)
    )
    assert torch.autograd.gradcheck(lambda x: ops.segment_mean(x, off, kernel="triton"), (v,))
    assert torch.autograd.gradcheck(
        lambda x: ops.jagged_to_padded(x, off, 2, kernel="triton"), (v,)
    )


def check_degenerate_shapes_fall_back_cleanly():
    off = offsets_of([0, 0])
    empty = torch.zeros(0, 4)
    assert torch.equal(ops.segment_max(empty, off, kernel="triton"), torch.zeros(2, 4))
    assert ops.jagged_to_padded(empty, off, 3, kernel="triton").shape == (2, 3, 4)
    q = torch.randn(2, 4)
    out = ops.jagged_target_attention(q, empty, torch.zeros(0, 2), off, kernel="triton")
    assert torch.equal(out, torch.zeros(2, 2))
    no_segments = offsets_of([])
    assert ops.segment_sum(torch.zeros(0, 3), no_segments, kernel="triton").shape == (0, 3)
