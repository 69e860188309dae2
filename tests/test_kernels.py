"""The Triton kernels against the float64 reference: outputs and every gradient, odd sizes,
poisoned buffers, bad inputs. On the CPU they run in the Triton interpreter (float32, few large
blocks: each tl.dot costs milliseconds there); the `gpu` tests repeat the checks in bfloat16,
float16 and float32 on CUDA, over more sizes."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from linattn_core import kernel_attention, linear_attention
from linattn_core.kernels import INTERPRETED, causal_scan, triton_linear_attention
from linattn_core.testing import assert_close, in_float64, random_qkv

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
RTOL_FLOAT32 = 1e-5  # float32 with input_precision="ieee": chained sums over the sequence
# bfloat16 and float16: an emulation of the kernels' roundings in torch gives at most 5e-3 and
# 7e-4 (outputs and gradients, N up to 16k, d up to 128)
GPU_RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

cpu_kernels = pytest.mark.skipif(
    not INTERPRETED, reason="CPU kernels need TRITON_INTERPRET=1 before the first import"
)
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def poisoned_empty(monkeypatch):
    """torch.empty returns NaN-filled tensors, so an element a kernel leaves unwritten fails."""
    empty = torch.empty

    def nan_empty(*size, **kwargs):
        x = empty(*size, **kwargs)
        return x.fill_(float("nan")) if x.is_floating_point() else x

    monkeypatch.setattr(torch, "empty", nan_empty)


def reference(phi_q, phi_k, v, *, normalize, causal=True, eps=1e-6):
    """Linear attention in float64 on the CPU, cast back to the inputs' dtype and device.

    Up to N = 1024 the definition (`kernel_attention`, or the N×N numerator); beyond, the chunked
    form, which test_attention.py checks against it, in O(N) memory.
    """
    if phi_q.shape[-2] > 1024:
        options = {"causal": causal, "normalize": normalize, "method": "chunked", "eps": eps}
        return in_float64(linear_attention, phi_q, phi_k, v, **options)
    if normalize:
        return in_float64(kernel_attention, phi_q, phi_k, v, causal=causal, eps=eps)
    options = {"causal": causal, "normalize": False, "method": "parallel"}
    return in_float64(linear_attention, phi_q, phi_k, v, **options)


def outputs_and_gradients(attention, phi_q, phi_k, v, grad_out):
    """attention(φ(q), φ(k), v) and its gradients for the output gradient `grad_out`."""
    inputs = [x.detach().clone().requires_grad_() for x in (phi_q, phi_k, v)]
    out = attention(*inputs)
    return (out.detach(), *torch.autograd.grad(out, inputs, grad_out))


def check_against_reference(phi_q, phi_k, v, *, normalize, rtol, eps=1e-6, **options):
    """Output, ∂/∂φ(q), ∂/∂φ(k), ∂/∂v of the kernels against the float64 reference."""
    grad_out = torch.randn(v.shape, generator=torch.Generator().manual_seed(1)).to(v)
    actual = outputs_and_gradients(
        lambda q, k, v_: triton_linear_attention(q, k, v_, normalize=normalize, eps=eps, **options),
        phi_q,
        phi_k,
        v,
        grad_out,
    )
    expected = outputs_and_gradients(
        lambda q, k, v_: reference(q, k, v_, normalize=normalize, eps=eps),
        *(x.double().cpu() for x in (phi_q, phi_k, v)),
        grad_out.double().cpu(),
    )
    for name, a, e in zip(("output", "dphi_q", "dphi_k", "dv"), actual, expected, strict=True):
        assert a.dtype == v.dtype and a.shape == e.shape
        assert_close(a, e, rtol=rtol, name=name)


# (batch, N, d, d_v, chunk_size, chunks_per_segment): N = 1; N not a multiple of the chunk;
# d_v ≠ d; d_v = 128 (two value blocks); other leading dims; several segments, the last one short.
CPU_SHAPES = [
    ((2, 2), 100, 16, 32, 64, None),
    ((1, 1), 1, 16, 16, 16, None),
    ((1, 2), 37, 32, 16, 16, 1),
    ((2, 1), 130, 16, 16, 64, 2),
    ((3,), 64, 16, 64, 32, None),
    ((), 70, 64, 128, 64, None),
]


@cpu_kernels
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize(("batch", "n", "d", "d_v", "chunk_size", "segment"), CPU_SHAPES)
def test_outputs_and_gradients_match_reference(batch, n, d, d_v, chunk_size, segment, normalize):
    # unnormalized attention is linear in the features: either sign, sums that stay moderate
    qkv = random_qkv(*batch, n=n, d=d, d_v=d_v, dtype=torch.float32, positive=normalize)
    check_against_reference(
        *qkv,
        normalize=normalize,
        rtol=RTOL_FLOAT32,
        chunk_size=chunk_size,
        chunks_per_segment=segment,
        eps=one_token_eps(n),
    )


def one_token_eps(n):
    """With one token o = s v / (s + eps) ≈ v, whose gradients in φ(q) and φ(k) are O(eps) and
    come from the difference of two O(1) terms: their relative error would measure cancellation
    in float32 (in torch's autograd too), not the kernels. An eps above s makes them O(1)."""
    return 100.0 if n == 1 else 1e-6


def dense_scan(q, k, v, *, reverse, bias, bias_side, scale, scale_side):
    """r_i Σ_j (q_i·k_j + β) w_j v_j over j ≤ i (j ≥ i when reverse), in float64, as defined."""
    q, k, v, bias, scale = (x.double() for x in (q, k, v, bias, scale))
    scores = q @ k.mT  # (B, H, N, N)
    if bias_side == "query":
        scores = scores + bias[..., :, None]
    elif bias_side == "key":
        scores = scores + bias[..., None, :]
    if scale_side == "key":
        scores = scores * scale[..., None, :]
    out = (scores.triu() if reverse else scores.tril()) @ v
    return out * scale[..., None] if scale_side == "query" else out


@cpu_kernels
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("segment", [None, 1])
@pytest.mark.parametrize(
    ("reverse", "bias_side", "scale_side"),
    [
        (False, None, None),
        (True, None, None),
        (False, "query", "query"),  # the dq pass
        (True, "key", "key"),  # the dk pass
        (True, None, "key"),  # the dv pass
    ],
)
def test_causal_scan_in_both_directions_with_biases_and_scales(
    reverse, bias_side, scale_side, segment
):
    q, k, v = random_qkv(1, 2, n=77, d=16, d_v=32, dtype=torch.float32, seed=3)
    generator = torch.Generator().manual_seed(4)
    bias, scale = (
        torch.randn(1, 2, 77, generator=generator),
        torch.rand(1, 2, 77, generator=generator),
    )
    out, rden = causal_scan(
        q,
        k,
        v,
        reverse=reverse,
        bias=None if bias_side is None else bias,
        bias_side=bias_side,
        scale=None if scale_side is None else scale,
        scale_side=scale_side,
        chunk_size=32,
        chunks_per_segment=segment,
    )
    sides = {"bias_side": bias_side, "scale_side": scale_side}
    expected = dense_scan(q, k, v, reverse=reverse, bias=bias, scale=scale, **sides)
    assert rden is None
    assert_close(out, expected, rtol=RTOL_FLOAT32)


@cpu_kernels
@pytest.mark.usefixtures("poisoned_empty")
def test_scan_returns_the_reciprocal_denominator():
    phi_q, phi_k, v = random_qkv(1, 1, n=50, d=16, dtype=torch.float32, positive=True)
    out, rden = causal_scan(phi_q, phi_k, v, normalize=True, eps=0.5, chunk_size=16)
    denominator = (phi_q.double() @ phi_k.double().mT).tril().sum(-1) + 0.5  # (1, 1, N)
    assert rden.dtype == torch.float32
    assert_close(rden, 1 / denominator, rtol=RTOL_FLOAT32)
    assert_close(out, reference(phi_q, phi_k, v, normalize=True, eps=0.5), rtol=RTOL_FLOAT32)


@cpu_kernels
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("normalize", [True, False])
def test_method_triton_of_linear_attention(causal, normalize):
    phi_q, phi_k, v = random_qkv(2, n=45, d=16, dtype=torch.float32, positive=normalize)
    out = linear_attention(
        phi_q, phi_k, v, causal=causal, normalize=normalize, method="triton", chunk_size=16
    )
    expected = reference(phi_q, phi_k, v, normalize=normalize, causal=causal)
    assert_close(out, expected, rtol=RTOL_FLOAT32)


@cpu_kernels
def test_auto_stays_chunked_on_the_cpu(monkeypatch):
    # the interpreter is a test harness, not a fast path: "auto" must not pick it
    def refuse(*args, **kwargs):
        pytest.fail("method='auto' ran the Triton kernels on the CPU")

    monkeypatch.setattr("linattn_core.kernels.triton_linear_attention", refuse)
    phi_q, phi_k, v = random_qkv(n=20, d=16, dtype=torch.float32, positive=True)
    linear_attention(phi_q, phi_k, v, causal=True, method="auto")


@cpu_kernels
@pytest.mark.usefixtures("poisoned_empty")
def test_strided_inputs_and_broadcast_output_gradient():
    # (B, N, H, d) viewed as (B, H, N, d), and the stride-0 gradient of out.sum()
    q, k, v = (x.transpose(1, 2) for x in random_qkv(2, 40, n=3, d=16, dtype=torch.float32))
    q, k = q.abs(), k.abs()
    inputs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    triton_linear_attention(*inputs, chunk_size=16).sum().backward()
    expected_inputs = [x.detach().double().requires_grad_() for x in (q, k, v)]
    reference(*expected_inputs, normalize=True).sum().backward()
    for actual, expected in zip(inputs, expected_inputs, strict=True):
        assert_close(actual.grad, expected.grad, rtol=RTOL_FLOAT32)


@cpu_kernels
@pytest.mark.parametrize(("batch", "n"), [((2, 3), 0), ((0, 3), 5), ((0,), 0)])
def test_empty_inputs(batch, n):
    phi_q, phi_k, v = random_qkv(*batch, n=n, d=16, d_v=32, dtype=torch.float32)
    phi_q.requires_grad_()
    out = triton_linear_attention(phi_q, phi_k, v)
    assert out.shape == (*batch, n, 32)
    out.sum().backward()
    assert phi_q.grad.shape == phi_q.shape


def tensors(*shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype, device=DEVICE)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((tensors(1, 1, 8, 24),) * 2 + (tensors(1, 1, 8, 16),), {}, ValueError, r"d = phi_q"),
        ((tensors(1, 1, 8, 16),) * 2 + (tensors(1, 1, 8, 48),), {}, ValueError, r"d_v = v"),
        ((tensors(1, 1, 8, 16, dtype=torch.float64),) * 3, {}, TypeError, r"float64"),
        ((tensors(1, 1, 8, 16),) * 3, {"chunk_size": 100}, ValueError, r"chunk_size=100"),
        ((tensors(1, 1, 8, 16),) * 3, {"chunk_size": True}, ValueError, r"chunk_size=True"),
        ((tensors(1, 1, 8, 16),) * 3, {"chunks_per_segment": 0}, ValueError, "chunks_per_segm"),
        ((tensors(1, 1, 8, 16),) * 3, {"eps": -1.0}, ValueError, r"eps"),
        ((tensors(1, 8, 16), tensors(2, 8, 16), tensors(1, 8, 16)), {}, ValueError, r"phi_k"),
        ((tensors(1, 8, 16),) * 2 + (tensors(1, 8, 16, dtype=torch.int32),), {}, TypeError, "v"),
    ],
)
def test_bad_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=match) as raised:
        triton_linear_attention(*args, **kwargs)
    assert str(raised.value).startswith("triton_linear_attention: ")


def test_bad_scan_options():
    q = tensors(1, 1, 8, 16)
    with pytest.raises(ValueError, match=r"exactly 4 dimensions"):
        causal_scan(q[0], q[0], q[0])
    with pytest.raises(ValueError, match=r"does not combine with a bias"):
        causal_scan(q, q, q, normalize=True, bias=q[..., 0], bias_side="query")
    with pytest.raises(ValueError, match=r"does not combine with a scale"):
        causal_scan(q, q, q, normalize=True, scale=q[..., 0], scale_side="key")
    with pytest.raises(ValueError, match=r"bias_side must be"):
        causal_scan(q, q, q, bias=q[..., 0])
    with pytest.raises(ValueError, match=r"scale_side must be"):
        causal_scan(q, q, q, scale_side="key")
    with pytest.raises(ValueError, match=r"bias must have shape"):
        causal_scan(q, q, q, bias=q[..., :4, 0], bias_side="key")


def run_python(code, *, interpret):
    """Run `code` in a fresh interpreter, with or without TRITON_INTERPRET; return stdout."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    return child.stdout


def test_cpu_tensors_without_the_interpreter_are_refused():
    out = run_python(
        """
        import os
        import torch
        from linattn_core import linear_attention

        x = torch.ones(1, 1, 8, 16)
        for step in ("unset", "set too late"):
            try:
                linear_attention(x, x, x, causal=True, method="triton")
            except ValueError as error:
                print(step, "->", error)
            os.environ["TRITON_INTERPRET"] = "1"
        """,
        interpret=False,
    )
    unset, too_late = out.splitlines()
    assert "set the environment variable TRITON_INTERPRET=1 before" in unset
    assert "TRITON_INTERPRET=1 was set after triton was imported" in too_late
    assert "Got phi_q.device=cpu" in unset


def test_interpreter_switched_on_between_triton_and_the_kernels_is_refused():
    out = run_python(
        """
        import os
        import torch
        import triton  # defines triton's own library for compiled kernels
        os.environ["TRITON_INTERPRET"] = "1"
        from linattn_core import linear_attention

        x = torch.ones(1, 1, 8, 16)
        try:
            linear_attention(x, x, x, causal=True, method="triton")
        except ValueError as error:
            print(error)
        """,
        interpret=False,
    )
    assert "TRITON_INTERPRET=1 was set after triton was imported" in out


COMPILE_FOR_HOPPER = """
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from linattn_core.kernels import scan

INPUTS = ("q_ptr", "k_ptr", "v_ptr", "out_ptr")
DOT_DTYPES = {"bf16": tl.bfloat16, "fp16": tl.float32, "fp32": tl.float32}


def compile_kernel(kernel, dtype, constants, num_warps):
    signature = {}
    for name in kernel.arg_names:
        if name in constants:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = f"*{dtype}" if name in INPUTS else "*fp32"
        else:
            signature[name] = "fp32" if name == "eps" else "i32"
    constexprs = {(kernel.arg_names.index(name),): value for name, value in constants.items()}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    options = {"num_warps": num_warps}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


# (dtype, F, V, reverse, normalize, bias, scale, initial states): the forward pass and the
# three backward scans (dq: query bias and scale; dk: key bias and scale; dv: key scale) over
# the three dtypes; then the segment-state kernel with all of its branches
CASES = [
    ("bf16", 64, 64, False, True, 0, 0, True),
    ("bf16", 64, 128, False, False, 1, 1, True),
    ("fp16", 128, 64, True, False, 2, 2, False),
    ("fp32", 16, 32, True, False, 0, 2, True),
]
for dtype, f, v, reverse, normalize, bias, scale, initial in CASES:
    block = min(v, scan.VALUE_BLOCK)
    constants = {"F": f, "V": v, "BV": block, "C": 64, "NORMALIZE": normalize, "BIAS": bias}
    constants["SCALE"], constants["DOT_DTYPE"] = scale, DOT_DTYPES[dtype]
    constants["PRECISION"] = "ieee" if dtype == "fp32" else "tf32"
    num_warps = 4 if f * block < 64 * 64 else 8
    flags = {"REVERSE": reverse, "HAS_INITIAL": initial}
    compiled = compile_kernel(scan._causal_scan_kernel, dtype, constants | flags, num_warps)
    assert compiled.asm["cubin"]
constants.update(NORMALIZE=True, BIAS=2, SCALE=2, DOT_DTYPE=tl.bfloat16, PRECISION="tf32")
assert compile_kernel(scan._segment_state_kernel, "bf16", constants, 4).asm["cubin"]
print("compiled", len(CASES) + 1)
"""


def test_kernels_compile_for_hopper_without_a_gpu():
    """The GPU compiler rejects what the interpreter accepts (tiny dots, type changes in loops):
    compile every kind of launch to an sm_90 binary, which needs triton but no GPU."""
    try:
        from triton.backends import backends
    except ImportError:
        pytest.skip("this triton has no backend registry")
    if "nvidia" not in backends:
        pytest.skip("this triton build has no NVIDIA backend")
    assert run_python(COMPILE_FOR_HOPPER, interpret=False).strip() == "compiled 5"


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize(
    ("batch", "n", "d", "d_v", "chunk_size", "segment"),
    [
        ((2, 4), 1, 16, 16, 64, None),
        ((2, 4), 1000, 64, 64, 64, None),
        ((1, 8), 4099, 128, 128, 64, None),
        ((1, 8), 4099, 64, 32, 32, 1),
        ((3, 2), 777, 32, 128, 128, 3),
        ((16,), 2048, 64, 64, 16, None),
    ],
)
def test_gpu_outputs_and_gradients(batch, n, d, d_v, chunk_size, segment, normalize, dtype):
    qkv = random_qkv(*batch, n=n, d=d, d_v=d_v, dtype=dtype, positive=normalize)
    phi_q, phi_k, v = (x.cuda() for x in qkv)
    check_against_reference(
        phi_q,
        phi_k,
        v,
        normalize=normalize,
        rtol=GPU_RTOL[dtype],
        chunk_size=chunk_size,
        chunks_per_segment=segment,
        eps=one_token_eps(n),
    )


@gpu
@needs_cuda
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_long_sequence_with_segments_and_poisoned_buffers(dtype):
    phi_q, phi_k, v = (
        x.cuda() for x in random_qkv(2, 2, n=16411, d=64, dtype=dtype, positive=True)
    )
    check_against_reference(phi_q, phi_k, v, normalize=True, rtol=GPU_RTOL[dtype])
    segmented = triton_linear_attention(phi_q, phi_k, v, chunks_per_segment=4)
    whole = triton_linear_attention(phi_q, phi_k, v, chunks_per_segment=10**6)
    assert_close(segmented, whole, rtol=GPU_RTOL[dtype])


@gpu
@needs_cuda
def test_gpu_auto_method_runs_the_kernels(monkeypatch):
    import linattn_core.kernels

    calls = []
    kernel = linattn_core.kernels.triton_linear_attention
    monkeypatch.setattr(
        linattn_core.kernels,
        "triton_linear_attention",
        lambda *args, **kwargs: calls.append(1) or kernel(*args, **kwargs),
    )
    phi_q, phi_k, v = (
        x.cuda() for x in random_qkv(2, n=300, d=64, dtype=torch.bfloat16, positive=True)
    )
    out = linear_attention(phi_q, phi_k, v, causal=True)
    assert calls == [1]
    assert_close(out, reference(phi_q, phi_k, v, normalize=True), rtol=GPU_RTOL[torch.bfloat16])
    linear_attention(phi_q.double(), phi_k.double(), v.double(), causal=True)  # float64: chunked
    assert calls == [1]


@gpu
@needs_cuda
@pytest.mark.usefixtures("poisoned_empty")
def test_gpu_strided_bfloat16_inputs():
    q, k, v = (
        x.transpose(1, 2).cuda()
        for x in random_qkv(2, 1000, n=4, d=64, dtype=torch.bfloat16, positive=True)
    )
    check_against_reference(q, k, v, normalize=True, rtol=GPU_RTOL[torch.bfloat16])
