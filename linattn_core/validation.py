"""Input checks of every public function of the package: one module, one error style.

Every message starts with the public function's name and names the argument, what was expected
and what was received, so that an error raised deep in a notebook points at the call to fix.
Wrong types and dtypes raise `TypeError`; wrong shapes, sizes, devices and options `ValueError`.
A size or option of the wrong type (`chunk_size="64"`, `causal="yes"`) raises `ArgumentTypeError`,
which is both: a `TypeError` by this policy, and the `ValueError` that the package's API contract
promises for sizes and options.

Policy on data-dependent checks: the checks look at types, shapes, dtypes, devices and options,
never at the values inside a tensor. A value check (a NaN, a zero on a diagonal) would read the
whole tensor and, on a GPU, synchronize the device on every call; what a function does with such
values is documented in its docstring instead. The one exception is `cu_seqlens`, the boundaries
of packed sequences: `check_cu_seqlens` checks its structure only, and its S + 1 values are
checked (`check_cu_seqlens_values`) where they are read on the host anyway, by the PyTorch
methods that slice the sequences there (`linattn_core.packing`).
"""

import itertools
import math
import numbers

import torch


class ArgumentTypeError(TypeError, ValueError):
    """A size or an option of the wrong type (a str, a bool or a float for an int, a non-callable
    for a function): a TypeError that `except ValueError` also catches."""


def check_tensor(fn: str, name: str, x: object, *, min_rank: int) -> None:
    """A floating-point tensor with at least `min_rank` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{fn}: {name} must be a floating-point tensor; got dtype={x.dtype}")
    if x.dim() < min_rank:
        dimensions = "dimension" if min_rank == 1 else "dimensions"
        raise ValueError(
            f"{fn}: {name} must have at least {min_rank} {dimensions}; "
            f"got {name}.shape={shape_of(x)}"
        )


def check_matrix(fn: str, name: str, x: object) -> None:
    """A floating-point tensor with exactly two dimensions `(m, n)`."""
    check_tensor(fn, name, x, min_rank=2)
    if x.dim() != 2:
        raise ValueError(f"{fn}: {name} must be a matrix (m, n); got {name}.shape={shape_of(x)}")


def check_square(fn: str, name: str, x: object) -> None:
    """A floating-point square matrix `(n, n)`."""
    check_matrix(fn, name, x)
    if x.shape[0] != x.shape[1]:
        raise ValueError(
            f"{fn}: {name} must be a square matrix (n, n); got {name}.shape={shape_of(x)}"
        )


def check_attention_inputs(fn: str, names: tuple[str, str, str], q, k, v) -> None:
    """q, k `(..., N, d)` and v `(..., N, d_v)` with equal batch dims, dtype and device, d ≥ 1.

    Batch dimensions must match exactly: a silent broadcast would hide a transposed head axis.
    """
    if _well_formed(q, k, v):  # a few comparisons for the inputs of a training loop
        return
    q_name, k_name, v_name = names
    for name, x in zip(names, (q, k, v), strict=True):
        check_tensor(fn, name, x, min_rank=2)
    for name, x in ((k_name, k), (v_name, v)):
        _require_same(fn, "batch dimensions", slice(None, -2), name, x, q_name, q)
    for name, x in ((q_name, q), (k_name, k)):
        _require_same(fn, "sequence length N", -2, name, x, v_name, v)
    _require_same(fn, "feature dimension d", -1, k_name, k, q_name, q)
    if q.shape[-1] == 0:
        raise ValueError(
            f"{fn}: {q_name} and {k_name} must have at least one feature (d ≥ 1); "
            f"got {q_name}.shape={shape_of(q)}"
        )
    check_same_dtype_and_device(fn, q_name, q, **{k_name: k, v_name: v})


def _well_formed(q, k, v) -> bool:
    """Whether q, k, v pass `check_attention_inputs` (False: let it find the error)."""
    if not (
        isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
    ):
        return False
    q_shape, k_shape, v_shape = q.shape, k.shape, v.shape
    return (
        q.is_floating_point()
        and len(q_shape) >= 2
        and q_shape == k_shape
        and q_shape[:-1] == v_shape[:-1]
        and q_shape[-1] > 0
        and q.dtype == k.dtype == v.dtype
        and q.device == k.device == v.device
    )


def check_cu_seqlens(fn: str, cu_seqlens: object, q=None, *, q_name: str = "q") -> None:
    """`cu_seqlens` of packed inputs (`linattn_core.packing`): an int64 tensor `(S + 1,)`, S ≥ 1,
    and, when q is given, on q's device, with q `(1, H, …, N, d)` holding the S sequences in a
    leading batch of 1.

    Only the structure is checked here, never the values: reading them would synchronize a GPU.
    The values (0 first, N last, non-decreasing) are checked where they are read on the host
    (`check_cu_seqlens_values`): by the PyTorch methods, which slice the sequences there, on
    every device; a device-side path checks them only for CPU tensors.
    """
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(
            f"{fn}: cu_seqlens must be a torch.Tensor of dtype torch.int64 or None; "
            f"got {type(cu_seqlens).__name__}"
        )
    if cu_seqlens.dtype != torch.int64:
        hint = " (convert it with cu_seqlens.long())" if not cu_seqlens.is_floating_point() else ""
        raise TypeError(
            f"{fn}: cu_seqlens must have dtype torch.int64{hint}; got dtype={cu_seqlens.dtype}"
        )
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2:
        raise ValueError(
            f"{fn}: cu_seqlens must be a 1-D tensor (S + 1,) of S ≥ 1 sequences' boundaries; "
            f"got cu_seqlens.shape={shape_of(cu_seqlens)}"
        )
    if q is None:
        return
    if cu_seqlens.device != q.device:
        raise ValueError(
            f"{fn}: cu_seqlens must be on the same device as {q_name}; "
            f"got {q_name}.device={q.device}, cu_seqlens.device={cu_seqlens.device}"
        )
    if q.dim() < 3 or q.shape[0] != 1:
        raise ValueError(
            f"{fn}: with cu_seqlens, {q_name} must hold the packed sequences in a leading batch "
            f"of 1, (1, H, N, d); got {q_name}.shape={shape_of(q)}"
        )


def check_cu_seqlens_values(fn: str, values: list[int], n: int) -> None:
    """The boundaries of packed sequences, read on the host: 0 first, N last, non-decreasing."""
    shown = values if len(values) <= 8 else [*values[:4], "…", *values[-3:]]
    got = f"got cu_seqlens=[{', '.join(map(str, shown))}]"
    if values[0] != 0 or values[-1] != n:
        raise ValueError(
            f"{fn}: cu_seqlens must start at 0 and end at the sequence length N = {n}; {got}"
        )
    for s, (start, end) in enumerate(itertools.pairwise(values)):
        if end < start:
            raise ValueError(
                f"{fn}: cu_seqlens must be non-decreasing (sequence lengths ≥ 0); "
                f"cu_seqlens[{s + 1}] = {end} < cu_seqlens[{s}] = {start}; {got}"
            )


def state_batch(q: torch.Tensor, cu_seqlens: torch.Tensor | None) -> tuple[int, ...]:
    """The batch dimensions of a state for queries `(..., N, d)`: q's, or one state per sequence
    `(S, H, …)` when `cu_seqlens` (S + 1 boundaries) packs S sequences into q `(1, H, …, N, d)`."""
    if cu_seqlens is None:
        return tuple(q.shape[:-2])
    return (cu_seqlens.shape[0] - 1, *q.shape[1:-2])


def one_per_sequence(cu_seqlens: torch.Tensor | None) -> str:
    """The words an error message about a state adds for packed inputs: one state per sequence."""
    if cu_seqlens is None:
        return ""
    return f", one per sequence of cu_seqlens (S = {cu_seqlens.shape[0] - 1})"


def check_same_dtype_and_device(fn: str, ref_name: str, ref: torch.Tensor, **others) -> None:
    """Each tensor of `others` (name=tensor) has the dtype and device of `ref`."""
    for name, x in others.items():
        if x.dtype != ref.dtype:
            raise TypeError(
                f"{fn}: {name} must have the same dtype as {ref_name}; "
                f"got {ref_name}.dtype={ref.dtype}, {name}.dtype={x.dtype}"
            )
        if x.device != ref.device:
            raise ValueError(
                f"{fn}: {name} must be on the same device as {ref_name}; "
                f"got {ref_name}.device={ref.device}, {name}.device={x.device}"
            )


def softmax_scale(fn: str, scale: object, d: int) -> float:
    """The multiplier of q·k: `scale` checked to be a positive finite number, 1/√d for None."""
    if scale is None:
        return d**-0.5
    check_positive_number(fn, "scale", scale)
    return scale


def check_positive_int(fn: str, name: str, value: object) -> None:
    _check_number(fn, name, value, "a positive int", _is_int, lambda v: v >= 1)


def check_non_negative_int(fn: str, name: str, value: object) -> None:
    _check_number(fn, name, value, "a non-negative int", _is_int, lambda v: v >= 0)


def check_eps(fn: str, eps: object) -> None:
    finite = "a non-negative finite number"
    _check_number(fn, "eps", eps, finite, _is_real, lambda v: math.isfinite(v) and v >= 0)


def check_positive_number(fn: str, name: str, value: object) -> None:
    finite = "a positive finite number"
    _check_number(fn, name, value, finite, _is_real, lambda v: math.isfinite(v) and v > 0)


def check_flag(fn: str, name: str, value: object) -> None:
    """A bool option (`causal`, `normalize`): anything else is an `ArgumentTypeError`."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{fn}: {name} must be a bool; got {name}={value!r}")


def check_choice(fn: str, name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(
            f"{fn}: {name} must be one of {', '.join(map(repr, choices))}; got {name}={value!r}"
        )


def _require_same(fn, what, dims, name, x, ref_name, ref) -> None:
    if x.shape[dims] != ref.shape[dims]:
        raise ValueError(
            f"{fn}: {name} must have the same {what} as {ref_name}; "
            f"got {name}.shape={shape_of(x)}, {ref_name}.shape={shape_of(ref)}"
        )


def shape_of(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape)


def _check_number(fn, name, value, expected, right_type, in_range):
    """The policy: a value of the wrong type (a str, a bool, a float for an int) raises TypeError,
    a value out of range ValueError; both messages say what was expected and what was received."""
    if not right_type(value):
        raise ArgumentTypeError(f"{fn}: {name} must be {expected}; got {name}={value!r}")
    if not in_range(value):
        raise ValueError(f"{fn}: {name} must be {expected}; got {name}={value!r}")


def _is_int(value: object) -> bool:
    # bool is an int subclass, but chunk_size=True is a bug, not a size
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
