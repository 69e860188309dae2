"""The inputs as the kernels take them, and the results back: the plumbing that every operation's
public function, autograd Function and torch.library operator shares (flash-linear-attention's
`input_guard` is its kind).

The kernels take contiguous `(B, H, N, ·)` tensors. An operation's inputs have any leading
dimensions `batch`: two are the kernels' (B, H) as they are, any other number becomes one batch
of prod(batch) heads (`as_heads`), and the results get the caller's dimensions back
(`from_heads`); strides become contiguous copies once, before the pass (`contiguous`). Inputs
without a token or without a head launch nothing: the state passes through (`passed_state`)
and every gradient is zero. None stands for an absent optional tensor everywhere.
"""

import math

import torch


def contiguous(*tensors):
    """Each tensor contiguous (a copy only where its strides differ); None stays None."""
    return tuple(None if x is None else x.contiguous() for x in tensors)


def as_heads(batch, *tensors):
    """Tensors with leading dimensions `batch` as `(B, H, ·)`: as they are when `batch` has two
    dimensions, else `(1, prod(batch), ·)` (a view where the strides allow)."""
    if len(batch) == 2:
        return tensors
    heads = math.prod(batch)
    return tuple(
        None if x is None else x.reshape(1, heads, *x.shape[len(batch) :]) for x in tensors
    )


def from_heads(batch, *tensors):
    """`as_heads` undone: `(B, H, ·)` tensors with the leading dimensions `batch` back."""
    if len(batch) == 2:
        return tensors
    return tuple(None if x is None else x.reshape(*batch, *x.shape[2:]) for x in tensors)


def has_work(v):
    """Whether a pass launches anything: the values `(B, H, N, d_v)` hold a token of a head."""
    return v.numel() > 0


def passed_state(initial, shape, like):
    """The final state of inputs without tokens: a copy of the initial state, or zeros of
    `shape` in `like`'s dtype and device (a new tensor, never an alias of an input)."""
    return like.new_zeros(shape) if initial is None else initial.clone()


def zero_grads(*tensors):
    """The gradients of inputs that no token reached: zeros of their shapes."""
    return tuple(torch.zeros_like(x) for x in tensors)
