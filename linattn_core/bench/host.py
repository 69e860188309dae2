"""Where the host's time goes in a short pass: what `make gpu-check` measures besides the
benchmark (its "host" section).

At N = 1024 a forward and backward pass of the kernels takes the GPU some 30–80 µs and the host
several times that, so the pass's time is the host's. Each item below is measured as the mean
host time of a call in a loop that never waits for the GPU (the queue of launches stays far from
full), in microseconds:

- the unit costs: an empty Triton kernel's launch, `torch.empty`, an empty autograd Function
  (its forward clones, its backward passes the gradient on), forward and backward;
- ours: `linear_attention(method="triton")`, unnormalized as in the benchmark (whose kernels the
  check has compiled), forward, forward and backward, the latter also with autograd's device
  threads off (`set_multithreading_enabled(False)`: the backward pass then runs on the calling
  thread), the launchers alone, without autograd, and forward and backward through the
  torch.library operators that torch.compile traces (`kernels/ops.py`), called eagerly;
- the delta rule (`delta_rule(method="triton")`), forward and backward;
- SDPA forward and backward, for scale.

Together with `kernels.tools.launches.host_work` (launches and torch operations per call, counted
on the CPU) they say whether a pass costs what its launches and operations predict.
"""

import time

import torch
import triton

from linattn_core.attention import linear_attention
from linattn_core.delta import delta_rule
from linattn_core.kernels.common import device_arch
from linattn_core.kernels.linear_attention.backward import chunk_linear_attention_bwd
from linattn_core.kernels.linear_attention.forward import chunk_linear_attention_fwd
from linattn_core.kernels.ops import causal_linear_attention
from linattn_core.kernels.tools.launches import host_work


@triton.jit
def _empty_kernel(x):
    """Nothing: the launch alone."""
    pass


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


def per_call_us(step, device, *, calls=300, warmup=30):
    """Mean host microseconds of `step()` over `calls` calls that do not wait for the GPU."""
    for _ in range(warmup):
        step()
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        step()
    elapsed = time.perf_counter() - start
    _synchronize(device)
    return round(elapsed / calls * 1e6, 1)


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_costs(device, *, n=1024, heads=16, d=64, dtype=torch.bfloat16, calls=300, warmup=30):
    """{item: µs per call} of the module's docstring, for (1, heads, n, d) inputs, and the
    launches and torch operations of a forward and backward pass (`host_work`)."""
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (
        torch.rand(1, heads, n, d, generator=generator, device=device, dtype=dtype).requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(v.shape, generator=generator, device=device).to(dtype)
    leaves = (q, k, v)
    x = torch.zeros(16, device=device, requires_grad=True)
    options = {"chunk_size": 64, "arch": device_arch(device)}
    detached = [t.detach() for t in leaves]
    _, rden, o32, _ = chunk_linear_attention_fwd(
        *detached, normalize=False, eps=1e-6, keep_float32=False, **options
    )

    def ours():
        return linear_attention(q, k, v, causal=True, normalize=False, method="triton")

    def ours_operators():  # the path torch.compile traces, called eagerly: the dispatcher's cost
        return causal_linear_attention(q, k, v, None, None, False, 1e-6, 64, False)[0]

    beta = torch.rand(1, heads, n, generator=generator, device=device, dtype=dtype)
    beta.requires_grad_()

    def delta():
        return delta_rule(q, k, v, beta, method="triton")[0]

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def backward(forward):
        return lambda: torch.autograd.grad(forward(), leaves, grad)

    steps = {
        "triton_empty_launch": lambda: _empty_kernel[(1,)](x),
        "torch_empty": lambda: torch.empty(16, device=device),
        "identity_function_fwd_bwd": lambda: torch.autograd.grad(_Identity.apply(x), x, x),
        "ours_fwd": ours,
        "ours_fwd_bwd": backward(ours),
        "launchers_fwd": lambda: chunk_linear_attention_fwd(
            *detached, normalize=False, eps=1e-6, **options
        ),
        "launchers_bwd": lambda: chunk_linear_attention_bwd(*detached, o32, rden, grad, **options),
        "sdpa_fwd_bwd": backward(sdpa),
        "ours_operators_fwd_bwd": backward(ours_operators),
        "delta_fwd_bwd": lambda: torch.autograd.grad(delta(), (*leaves, beta), grad),
    }
    count = {"calls": calls, "warmup": warmup}
    costs = {name: per_call_us(step, device, **count) for name, step in steps.items()}
    with torch.autograd.set_multithreading_enabled(False):
        costs["ours_fwd_bwd_single_thread"] = per_call_us(backward(ours), device, **count)
    work = host_work(backward(ours))
    kinds = ("computing", "allocation", "view", "synchronizing")
    costs["ours_fwd_bwd_work"] = {"launches": work.launches} | {
        kind: sum(work.of_kind(kind).values()) for kind in kinds
    }
    return {"n": n, "heads": heads, "d": d, "dtype": str(dtype).removeprefix("torch.")} | costs


def host_line(costs):
    """One line for the terminal."""
    items = {k: v for k, v in costs.items() if isinstance(v, float)}
    return f"host µs per call at N = {costs['n']}: " + ", ".join(
        f"{k} {v:g}" for k, v in items.items()
    )
