"""The Triton kernels against the float64 reference: outputs and every gradient, odd sizes,
poisoned buffers, bad inputs, both architectures' tiles. On the CPU they run in the Triton
interpreter, in float32, float16 and bfloat16 (16-bit operands are rounded as on a GPU, products
accumulate in float32; see `interpreter_bfloat16_dot`); each tl.dot costs milliseconds there, so
the CPU shapes are small. The `gpu` tests repeat the checks on CUDA, over more sizes."""

from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from linattn_core import kernel_attention, linear_attention
from linattn_core.kernels import triton_linear_attention
from linattn_core.kernels.linear_attention import backward, forward
from linattn_core.kernels.linear_attention.backward import chunk_linear_attention_bwd
from linattn_core.kernels.linear_attention.forward import (
    chunk_linear_attention_fwd,
    segment_length,
    segment_sums,
)
from linattn_core.testing import (
    KERNEL_RTOL,
    assert_close,
    in_float64,
    random_qkv,
    run_python,
    values_and_gradients,
)

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
RTOL_FLOAT32 = KERNEL_RTOL[torch.float32]


gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


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
    return values_and_gradients(attention, (phi_q, phi_k, v), grad_out)


def check_against_reference(phi_q, phi_k, v, *, normalize, rtol, eps=1e-6, dq_rtol=None):
    """Output, ∂/∂φ(q), ∂/∂φ(k), ∂/∂v of the kernels against the float64 reference (∂/∂φ(q)
    within `dq_rtol` when given)."""
    grad_out = torch.randn(v.shape, generator=torch.Generator().manual_seed(1)).to(v)
    options = {"causal": True, "normalize": normalize, "eps": eps}
    actual = outputs_and_gradients(
        lambda q, k, v_: triton_linear_attention(q, k, v_, **options),
        phi_q,
        phi_k,
        v,
        grad_out,
    )
    expected = outputs_and_gradients(
        lambda q, k, v_: reference(q, k, v_, **options),
        *(x.double().cpu() for x in (phi_q, phi_k, v)),
        grad_out.double().cpu(),
    )
    rtols = (rtol, dq_rtol or rtol, rtol, rtol)
    names = ("output", "dphi_q", "dphi_k", "dv")
    for name, a, e, tolerance in zip(names, actual, expected, rtols, strict=True):
        assert a.dtype == v.dtype and a.shape == e.shape
        assert_close(a, e, rtol=tolerance, name=name)


def one_token_eps(n):
    """With one token o = s v / (s + eps) ≈ v, whose gradients in φ(q) and φ(k) are O(eps) and
    come from the difference of two O(1) terms: their relative error would measure cancellation
    in float32 (in torch's autograd too), not the kernels. An eps above s makes them O(1)."""
    return 100.0 if n == 1 else 1e-6


# (batch, N, d, d_v), chunks of 64: N = 1; N shorter than a chunk; N not a multiple of the chunk;
# a last chunk of one token; d_v ≠ d; d = 128 (eight feature tiles of float32, two value tiles);
# other leading dims
CPU_SHAPES = [
    ((2, 2), 100, 16, 32),
    ((1, 1), 1, 16, 16),
    ((1, 2), 37, 32, 16),
    ((2, 1), 129, 16, 16),
    ((3,), 128, 16, 64),
    ((), 70, 128, 32),
]


@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize(("batch", "n", "d", "d_v"), CPU_SHAPES)
def test_outputs_and_gradients_match_reference(batch, n, d, d_v, normalize):
    # unnormalized attention is linear in the features: either sign, sums that stay moderate
    qkv = random_qkv(*batch, n=n, d=d, d_v=d_v, dtype=torch.float32, positive=normalize)
    check_against_reference(*qkv, normalize=normalize, rtol=RTOL_FLOAT32, eps=one_token_eps(n))


@pytest.fixture(params=["one walk", "segments"])
def walks(request, monkeypatch, fresh_plans):
    """Both ways through the kernels: a short sequence walked in one segment (the default up to
    ONE_WALK_CHUNKS chunks), and cut into segments of one chunk (the path of long sequences),
    each with launch plans of its own (`fresh_plans`)."""
    if request.param == "segments":
        for module in (forward, backward):
            monkeypatch.setattr(module, "segment_length", lambda *args: 1)
    return request.param


@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty", "interpreter_bfloat16_dot", "walks")
@pytest.mark.parametrize(
    ("n", "d", "d_v", "normalize", "dtype"),
    [  # each shape in both dtypes, normalized and not; each dtype normalized and not
        (200, 64, 32, True, torch.float16),
        (200, 64, 32, False, torch.bfloat16),
        (77, 16, 128, True, torch.bfloat16),
        (77, 16, 128, False, torch.float16),
    ],
)
def test_16_bit_operands(arch, n, d, d_v, normalize, dtype):
    qkv = random_qkv(1, 2, n=n, d=d, d_v=d_v, dtype=dtype, positive=normalize, seed=5)
    check_against_reference(*qkv, normalize=normalize, rtol=KERNEL_RTOL[dtype])


@pytest.mark.interpreter
@pytest.mark.usefixtures("walks")
def test_float16_states_and_denominators_stay_in_range():
    """Features and values of 30 on 512 tokens: the sums Σ k_jᵀ v_j pass float16's largest
    number (65504) after 2 of the 8 chunks, and ρ_i falls to 1e-7, below its smallest normal
    number (6e-5). Held in float32, divided by their largest magnitude where they become 16-bit
    operands, and with ρ scaled by the chunk's largest, they stay in range.

    ∂/∂φ(q_i) = ρ_i Σ_j φ(k_j) g_i·(v_j − o_i) is computed as ρ_i (g_i Sᵀ − (g_i·o_i) z): with
    values that share a large mean the two terms cancel, and the rounding of the 16-bit state S
    grows relative to their difference (here 7e-3 instead of 5e-4)."""
    generator = torch.Generator().manual_seed(2)
    phi_q, phi_k, v = (30 * torch.rand(1, 1, 512, 16, generator=generator) for _ in range(3))
    qkv = (x.half() for x in (phi_q, phi_k, v))
    check_against_reference(*qkv, normalize=True, rtol=KERNEL_RTOL[torch.float16], dq_rtol=1.5e-2)


@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("segment", [1, 2, 3, 5])
def test_segments_of_every_length(segment, normalize):
    """Segments of 1, 2, 3 and 5 chunks over 5 chunks (the last one short): the walks start
    from the other segments' sums and carry their states across chunks."""
    qkv = random_qkv(1, 2, n=300, d=32, d_v=16, dtype=torch.float32, positive=normalize, seed=3)
    grad_out = torch.randn(qkv[2].shape, generator=torch.Generator().manual_seed(4))
    options = {"chunk_size": 64, "arch": 90, "segment": segment}
    o, rden, o32, _ = chunk_linear_attention_fwd(
        *qkv, normalize=normalize, eps=1e-6, keep_float32=normalize, **options
    )
    *grads, _ = chunk_linear_attention_bwd(*qkv, o32, rden, grad_out, **options)
    expected = outputs_and_gradients(
        lambda q, k, v: reference(q, k, v, normalize=normalize),
        *(x.double() for x in qkv),
        grad_out.double(),
    )
    for name, a, e in zip(("output", "dq", "dk", "dv"), (o, *grads), expected, strict=True):
        assert_close(a, e, rtol=RTOL_FLOAT32, name=name)


@pytest.mark.interpreter
def test_segment_sums_add_up_each_segments_tokens():
    _, phi_k, v = random_qkv(2, 1, n=200, d=16, d_v=32, dtype=torch.float32, positive=True)
    """Row 0 holds the initial state (S_0 read transposed from `(B, H, d_v, d)`, and z_0), then
    one row a segment."""
    s0 = torch.randn(2, 1, 32, 16, dtype=torch.float64)
    z0 = torch.rand(2, 1, 16, dtype=torch.float64)
    hs, zs = segment_sums(
        phi_k, v, (s0.float(), z0.float()), normalize=True, chunk_size=64, segment=2, arch=90
    )
    bounds = [(0, 128), (128, 200)]  # 4 chunks in segments of 2
    sums = [phi_k[..., a:b, :].double().mT @ v[..., a:b, :].double() for a, b in bounds]
    assert_close(hs, torch.stack([s0.mT, *sums], 2), rtol=RTOL_FLOAT32)  # (B, H, NS + 1, d, d_v)
    key_sums = [phi_k[..., a:b, :].double().sum(-2) for a, b in bounds]
    assert_close(zs, torch.stack([z0, *key_sums], 2), rtol=RTOL_FLOAT32)


@pytest.mark.parametrize(
    ("chunks", "programs", "expected"),
    [
        (1024, 16, 32),
        (1024, 528, 1024),
        (1024, 2000, 1024),
        (17, 16, 1),
        (4096, 1, 64),
        (16, 16, 16),
        (3, 2000, 3),
    ],
)
def test_segment_length_gives_the_gpu_four_programs_per_multiprocessor(chunks, programs, expected):
    """132 multiprocessors want 528 programs: with 16 a segment, 33 segments of 32 chunks (the
    last one short); never more segments than chunks, nor more than MAX_SEGMENTS = 64; and a
    sequence of at most ONE_WALK_CHUNKS = 16 chunks is one segment, whatever the programs."""
    assert segment_length(chunks, programs, 132) == expected


@pytest.mark.interpreter
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("normalize", [True, False])
def test_method_triton_of_linear_attention(causal, normalize):
    phi_q, phi_k, v = random_qkv(2, n=45, d=16, dtype=torch.float32, positive=normalize)
    out = linear_attention(phi_q, phi_k, v, causal=causal, normalize=normalize, method="triton")
    expected = reference(phi_q, phi_k, v, normalize=normalize, causal=causal)
    assert_close(out, expected, rtol=RTOL_FLOAT32)


@pytest.mark.interpreter
def test_auto_stays_chunked_on_the_cpu(monkeypatch):
    # the interpreter is a test harness, not a fast path: "auto" must not pick it
    def refuse(*args, **kwargs):
        pytest.fail("method='auto' ran the Triton kernels on the CPU")

    monkeypatch.setattr("linattn_core.kernels.triton_linear_attention", refuse)
    phi_q, phi_k, v = random_qkv(n=20, d=16, dtype=torch.float32, positive=True)
    linear_attention(phi_q, phi_k, v, causal=True, method="auto")


@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty")
def test_strided_inputs_and_broadcast_output_gradient():
    # (B, N, H, d) viewed as (B, H, N, d), and the stride-0 gradient of out.sum()
    q, k, v = (x.transpose(1, 2) for x in random_qkv(2, 40, n=3, d=16, dtype=torch.float32))
    q, k = q.abs(), k.abs()
    inputs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    triton_linear_attention(*inputs, causal=True).sum().backward()
    expected_inputs = [x.detach().double().requires_grad_() for x in (q, k, v)]
    reference(*expected_inputs, normalize=True).sum().backward()
    for actual, expected in zip(inputs, expected_inputs, strict=True):
        assert_close(actual.grad, expected.grad, rtol=RTOL_FLOAT32)


@pytest.mark.interpreter
@pytest.mark.parametrize(("batch", "n"), [((2, 3), 0), ((0, 3), 5), ((0,), 0)])
def test_empty_inputs(batch, n):
    phi_q, phi_k, v = random_qkv(*batch, n=n, d=16, d_v=32, dtype=torch.float32)
    phi_q.requires_grad_()
    out = triton_linear_attention(phi_q, phi_k, v, causal=True)
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
        (
            (tensors(1, 1, 8, 16),) * 3,
            {"chunk_size": True},
            TypeError,
            r"chunk_size must be an int; got bool True",
        ),
        ((tensors(1, 1, 8, 16),) * 3, {"eps": -1.0}, ValueError, r"eps"),
        ((tensors(1, 8, 16), tensors(2, 8, 16), tensors(1, 8, 16)), {}, ValueError, r"phi_k"),
        ((tensors(1, 8, 16),) * 2 + (tensors(1, 8, 16, dtype=torch.int32),), {}, TypeError, "v"),
    ],
)
def test_bad_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=match) as raised:
        triton_linear_attention(*args, **kwargs)
    assert str(raised.value).startswith("triton_linear_attention: ")


@pytest.mark.slow  # a fresh Python process
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
        cwd=ROOT,
    )
    unset, too_late = out.splitlines()
    assert "set the environment variable TRITON_INTERPRET=1 before" in unset
    assert "TRITON_INTERPRET=1 was set after triton was imported" in too_late
    assert "Got phi_q.device=cpu" in unset


@pytest.mark.slow  # a fresh Python process
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
        cwd=ROOT,
    )
    assert "TRITON_INTERPRET=1 was set after triton was imported" in out


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize(
    ("batch", "n", "d", "d_v"),
    [
        ((2, 4), 1, 16, 16),
        ((2, 4), 1000, 64, 64),
        ((1, 8), 4099, 128, 128),
        ((1, 8), 4099, 64, 32),
        ((3, 2), 777, 32, 128),
        ((16,), 2048, 64, 16),
    ],
)
def test_gpu_outputs_and_gradients(batch, n, d, d_v, normalize, dtype):
    qkv = random_qkv(*batch, n=n, d=d, d_v=d_v, dtype=dtype, positive=normalize)
    phi_q, phi_k, v = (x.cuda() for x in qkv)
    check_against_reference(
        phi_q,
        phi_k,
        v,
        normalize=normalize,
        rtol=KERNEL_RTOL[dtype],
        eps=one_token_eps(n),
    )


@gpu
@needs_cuda
@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_long_sequence_with_poisoned_buffers(dtype):
    phi_q, phi_k, v = (
        x.cuda() for x in random_qkv(2, 2, n=16411, d=64, dtype=dtype, positive=True)
    )
    check_against_reference(phi_q, phi_k, v, normalize=True, rtol=KERNEL_RTOL[dtype])


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
    assert_close(out, reference(phi_q, phi_k, v, normalize=True), rtol=KERNEL_RTOL[torch.bfloat16])
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
    check_against_reference(q, k, v, normalize=True, rtol=KERNEL_RTOL[torch.bfloat16])


@pytest.mark.interpreter
@pytest.mark.usefixtures("poisoned_empty", "interpreter_bfloat16_dot")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("normalize", "segment"), [(True, 2), (False, 1), (True, None)])
def test_initial_and_final_states(monkeypatch, fresh_plans, normalize, segment, dtype):
    """From an initial state (S_0, z_0) to the final state, over 5 chunks in segments of 1, 2 or
    the default (one walk): outputs, the final state and the gradients of all five inputs from a
    loss on both outputs, against the chunked form in float64; float32's tiles of 16 split the
    state into 2 × 2 tiles."""
    if segment is not None:
        for module in (forward, backward):
            monkeypatch.setattr(module, "segment_length", lambda *args: segment)
    generator = torch.Generator().manual_seed(7)
    phi_q, phi_k, v = random_qkv(1, 1, n=300, d=32, d_v=32, dtype=dtype, positive=True, seed=6)
    s0 = torch.randn(1, 1, 32, 32, generator=generator).to(dtype)
    z0 = torch.rand(1, 1, 32, generator=generator).to(dtype) if normalize else None
    inputs = [x for x in (phi_q, phi_k, v, s0, z0) if x is not None]
    outputs = [x for x in (v, s0, z0) if x is not None]  # the shapes of o, S and z
    grads = [torch.randn(x.shape, generator=generator).to(dtype) for x in outputs]

    def attention(method):
        def run(phi_q, phi_k, v, s0, z0=None):
            out, final = linear_attention(
                phi_q, phi_k, v, causal=True, normalize=normalize, method=method,
                initial_state=(s0, z0), output_final_state=True,
            )  # fmt: skip
            return (out, final.S) if z0 is None else (out, final.S, final.z)

        return run

    actual = values_and_gradients(attention("triton"), inputs, grads)
    expected = values_and_gradients(
        attention("chunked"), [x.double() for x in inputs], [g.double() for g in grads]
    )
    names = ["output", "S", "z"][: len(grads)] + ["dq", "dk", "dv", "dS_0", "dz_0"][: len(inputs)]
    for name, a, e in zip(names, actual, expected, strict=True):
        assert_close(a, e, rtol=KERNEL_RTOL[dtype], name=name)
