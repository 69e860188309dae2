"""Watch Triton kernels run in the interpreter: every load, store and matrix product they execute.

`record()` wraps the interpreter's memory and `tl.dot` operations for the duration of a `with`
block and keeps, for each one, the kernel, the program (its `tl.program_id`s), the
addresses that its mask let through and their element size. `Trace.locate` maps those addresses
back to the tensors of a launch (which element of which tensor), so a figure can show which tiles
each program read and wrote; `Trace.bytes` and `Trace.flops` count what the kernels moved and
computed. With `bounds=` the recorder becomes a bounds checker: an access outside the given
tensors is reported as an `OutOfBounds` entry and masked off (a tile belongs to the tensor that
holds its lowest address, and must stay inside it), so it never touches memory that the
kernel does not own (a GPU would fault there, or read garbage; the interpreter reads the host's
memory without complaint).

Runs only where the kernels are interpreted (TRITON_INTERPRET=1 before triton's first import).
"""

import contextlib
import dataclasses

import numpy as np
from triton.runtime import interpreter

from linattn_core.kernels.forward import INTERPRETED

__all__ = ["Access", "OutOfBounds", "Trace", "record"]


@dataclasses.dataclass(frozen=True)
class Access:
    """One `tl.load` or `tl.store` of one program: the addresses its mask let through."""

    kernel: str
    program: tuple  # (program_id(0), …), as many ids as the launch grid has dimensions
    op: str  # "load" or "store"
    addresses: np.ndarray  # uint64 byte addresses, in the order of the tile's elements
    itemsize: int

    @property
    def bytes(self):
        return self.addresses.size * self.itemsize


@dataclasses.dataclass(frozen=True)
class OutOfBounds:
    """Addresses that a program loaded or stored outside every tensor it was given."""

    kernel: str
    program: tuple
    op: str
    count: int  # elements outside
    nearest: str  # the tensor whose end (or start) the first such address lies nearest to
    elements_past: int  # elements between its end and the address (negative: before its start)


@dataclasses.dataclass
class Trace:
    """What the interpreter executed inside `record()`."""

    accesses: list = dataclasses.field(default_factory=list)
    out_of_bounds: list = dataclasses.field(default_factory=list)
    dot_flops: dict = dataclasses.field(default_factory=dict)  # kernel → FLOPs of its tl.dot

    def bytes(self, kernel=None, op=None):
        """Bytes loaded and stored (by `kernel`, of kind `op`; None: all)."""
        return sum(
            a.bytes for a in self.accesses if kernel in (None, a.kernel) and op in (None, a.op)
        )

    def flops(self, kernel=None):
        """FLOPs of the matrix products (2 per multiply-add), of one kernel or all."""
        if kernel is None:
            return sum(self.dot_flops.values())
        return self.dot_flops.get(kernel, 0)

    def kernels(self):
        """The kernels that ran, in order of their first access."""
        return list(dict.fromkeys(a.kernel for a in self.accesses))

    def locate(self, tensors):
        """[(access, tensor name, flat element indices)] for every access inside one of `tensors`
        ({name: tensor}); an access that straddles tensors is split among them."""
        located = []
        for access in self.accesses:
            for name, tensor in tensors.items():
                start, end = _extent(tensor)
                inside = (access.addresses >= start) & (access.addresses < end)
                if inside.any():
                    flat = (access.addresses[inside] - start) // tensor.element_size()
                    located.append((access, name, flat.astype(np.int64)))
        return located

    def touched(self, tensors, scratch=None):
        """{(kernel, program): {(name, op): set of indices}}: which rows, chunk boundaries, …
        each program loaded and stored, for tensors given as {name: (tensor, dim)}, an index
        being the position along `dim` (−2 for the token rows of `(…, N, d)`).

        scratch: optional (name, block bytes) for memory outside `tensors` that the launcher
        allocated itself (such as the chunk states), indexed in blocks from its lowest address.
        """
        found = {}

        def add(access, name, indices):
            program = found.setdefault((access.kernel, access.program), {})
            program.setdefault((name, access.op), set()).update(indices)

        for access, name, flat in self.locate({n: t for n, (t, _) in tensors.items()}):
            tensor, dim = tensors[name]
            add(access, name, ((flat // tensor.stride(dim)) % tensor.shape[dim]).tolist())
        if scratch:
            name, block = scratch
            extents = [_extent(t) for t, _ in tensors.values()]
            outside = [
                (access, access.addresses[_outside(access.addresses, extents)])
                for access in self.accesses
            ]
            lowest = min((int(a.min()) for _, a in outside if a.size), default=0)
            for access, addresses in outside:
                if addresses.size:
                    add(access, name, ((addresses - lowest) // block).tolist())
        return found


def _outside(addresses, extents):
    inside = np.zeros(addresses.shape, dtype=bool)
    for start, end in extents:
        inside |= (addresses >= start) & (addresses < end)
    return ~inside


def _extent(tensor):
    """[first byte, one past the last byte] of the memory a tensor's elements occupy."""
    start = tensor.data_ptr()
    extent = zip(tensor.shape, tensor.stride(), strict=True)
    last = sum((size - 1) * stride for size, stride in extent)
    return start, start + (last + 1) * tensor.element_size()


@contextlib.contextmanager
def record(bounds=None):
    """Record what interpreted kernels do inside the block; yields the `Trace`.

    bounds: optional {name: tensor}, the memory the kernels may touch. Accesses outside it are
    recorded in `Trace.out_of_bounds` and masked off (a load gets the `other` value).
    """
    if not INTERPRETED:
        raise RuntimeError(
            "linattn_core.kernels.trace watches the Triton interpreter: set TRITON_INTERPRET=1 "
            "before triton is first imported"
        )
    trace, running = Trace(), []
    extents = {name: _extent(t) for name, t in (bounds or {}).items()}
    builder = interpreter.InterpreterBuilder
    run, dot = interpreter.InterpretedFunction.run, builder.create_dot
    load, store = builder.create_masked_load, builder.create_masked_store

    def traced_run(self, *args, **kwargs):
        running.append(self.fn.__name__)
        try:
            return run(self, *args, **kwargs)
        finally:
            running.pop()

    def note(builder_self, op, ptrs, mask, itemsize):
        """Record one access; return the mask with out-of-bounds elements switched off."""
        addresses, allowed = ptrs.data.astype(np.uint64), mask.data.astype(bool)
        program = _program(builder_self.grid_idx, builder_self.grid_dim)
        if extents and allowed.any():
            owner = _owner(extents, int(addresses[allowed].min()))
            if owner is None:
                outside = allowed
            else:
                start, end = extents[owner]
                outside = allowed & ((addresses < start) | (addresses >= end))
            if outside.any():
                first = int(addresses[outside].flat[0])
                name, past = _nearest(extents, first, itemsize)
                trace.out_of_bounds.append(
                    OutOfBounds(running[-1], program, op, int(outside.sum()), name, past)
                )
                allowed = allowed & ~outside
                mask = interpreter.TensorHandle(allowed, mask.dtype)
        trace.accesses.append(
            Access(running[-1], program, op, addresses[allowed].ravel(), itemsize)
        )
        return mask

    def traced_load(self, ptrs, mask, other, *args):
        itemsize = ptrs.get_element_ty().primitive_bitwidth // 8
        return load(self, ptrs, note(self, "load", ptrs, mask, itemsize), other, *args)

    def traced_store(self, ptrs, value, mask, *args):
        itemsize = value.data.itemsize
        return store(self, ptrs, value, note(self, "store", ptrs, mask, itemsize), *args)

    def traced_dot(self, a, b, *args):
        (m, k), n = a.data.shape[-2:], b.data.shape[-1]
        name = running[-1]
        trace.dot_flops[name] = trace.dot_flops.get(name, 0) + 2 * m * n * k
        return dot(self, a, b, *args)

    patches = (
        (interpreter.InterpretedFunction, "run", traced_run),
        (builder, "create_masked_load", traced_load),
        (builder, "create_masked_store", traced_store),
        (builder, "create_dot", traced_dot),
    )
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, patched in patches:
            setattr(owner, name, patched)
        yield trace
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def _owner(extents, address):
    """The tensor whose memory holds `address` (a tile's lowest), or None."""
    for name, (start, end) in extents.items():
        if start <= address < end:
            return name
    return None


def _program(index, grid):
    """A program's ids, as many as the grid has dimensions (trailing dimensions of size 1 cut)."""
    rank = max([1] + [axis + 1 for axis, size in enumerate(grid) if size > 1])
    return tuple(int(i) for i in index[:rank])


def _nearest(extents, address, itemsize):
    """(name, elements between its end and the address — 0: the element right after the end —
    or minus those before its start) of the tensor nearest to an address outside them."""

    def distance(item):
        start, end = item[1]
        return start - address if address < start else address - end + 1

    name, (start, end) = min(extents.items(), key=distance)
    if address < start:
        return name, -((start - address) // itemsize)
    return name, (address - end) // itemsize
