"""Watch Triton kernels run in the interpreter: every load, store, matrix product and rounding.

`record()` wraps the interpreter's memory, `tl.dot`, comparison and cast operations for the
duration of a `with` block. For each load, store and atomic read-modify-write it keeps the
kernel, the program (its `tl.program_id`s), the line of the kernel that made it, the address of
every lane of the tile and the lanes that its mask let through, whatever made the tile: pointers
(`tl.load(p, mask=…, other=…)`), a block pointer (`tl.make_block_ptr`, `boundary_check=`) or a
tensor descriptor (`tl.make_tensor_descriptor`). `Trace.locate` maps the addresses back to the
tensors of a launch (which element of which tensor), so a figure can show which tiles each
program read and wrote; `Trace.bytes` and `Trace.flops` count what the kernels moved and
computed; `Trace.products`, `Trace.comparisons` and `Trace.roundings` say on which lines they
multiplied tiles, built masks from positions and rounded to a narrower float.

Three options make the recorder a checker of the kernel's assumptions:

- `bounds=`: an access outside the given tensors is reported as an `OutOfBounds` entry and
  masked off (a tile belongs to the tensor that holds its lowest address, and must stay inside
  it), so it never touches memory that the kernel does not own (a GPU would fault there, or
  read garbage; the interpreter reads the host's memory without complaint);
- `undefined=`: a masked-off lane of a load that the kernel gave no value (no `other=`, a block
  pointer without `padding_option=`) reads this value instead of the interpreter's 0: Triton
  leaves such a lane undefined, and NaN shows where one reaches a result;
- `exact=True`: a cast to a narrower float keeps its value, so the kernel runs without its
  roundings (to float16, bfloat16, …), which tells precision loss from a logic error.

Runs only where the kernels are interpreted (TRITON_INTERPRET=1 before triton's first import).
"""

import contextlib
import dataclasses
import functools
import itertools
import linecache
import os
import sys

import numpy as np
import triton
import triton.language as tl
from triton.runtime import interpreter

from linattn_core.kernels.common import INTERPRETED

__all__ = [
    "Access",
    "OutOfBounds",
    "Rounding",
    "Runaway",
    "Site",
    "Trace",
    "kernel_site",
    "record",
]

# Frames in these directories belong to the interpreter (or NumPy), not to the kernel it runs.
_MACHINERY = (os.path.dirname(triton.__file__), os.path.dirname(np.__file__), __file__)
_COMPARISONS = (np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal)
_VIA = {  # the builder method that called the masked load or store → what made the tile
    "create_tensor_pointer_load": "block pointer",
    "create_tensor_pointer_store": "block pointer",
    "create_descriptor_load": "tensor descriptor",
    "create_descriptor_store": "tensor descriptor",
}


@dataclasses.dataclass(frozen=True)
class Site:
    """A line of a kernel's source and the call on it (whitespace collapsed)."""

    path: str
    line: int
    code: str

    def __str__(self):
        return f"line {self.line}, `{self.code}`"


@dataclasses.dataclass(frozen=True)
class Access:
    """One `tl.load`, `tl.store` or atomic read-modify-write (`tl.atomic_add`, …) of one
    program."""

    kernel: str
    program: tuple  # (program_id(0), …), as many ids as the launch grid has dimensions
    op: str  # "load", "store" or "atomic"
    tile: np.ndarray  # uint64 byte address of every lane, shaped like the tile
    allowed: np.ndarray  # bool, shaped like `tile`: the lanes its mask let through (and bounds)
    itemsize: int
    site: Site
    via: str  # "pointers", "block pointer" or "tensor descriptor"
    undefined: int = 0  # masked-off lanes of a load that the kernel gave no value

    @property
    def addresses(self):
        """The byte addresses it loaded or stored, in the order of the tile's elements."""
        return self.tile[self.allowed]

    @property
    def bytes(self):
        return int(self.allowed.sum()) * self.itemsize


@dataclasses.dataclass(frozen=True)
class OutOfBounds:
    """Addresses that a program loaded or stored outside every tensor it was given."""

    kernel: str
    program: tuple
    op: str
    count: int  # elements outside
    nearest: str  # the tensor the tile belongs to (or, if none, the one nearest to the address)
    elements_past: int  # elements between its end and the first address outside (negative:
    # elements between that address and its start)
    site: Site
    via: str
    masked: bool  # whether the kernel's mask (or boundary check) switched off any lane of the tile
    addresses: np.ndarray  # the byte addresses outside, in the order of the tile's elements


@dataclasses.dataclass(frozen=True)
class Rounding:
    """A cast of a program to a narrower float type (float32 to float16, …)."""

    kernel: str
    program: tuple
    site: Site
    dtype: str  # the narrower type, as Triton names it ("fp16", "bf16", …)


@dataclasses.dataclass
class Trace:
    """What the interpreter executed inside `record()`."""

    accesses: list = dataclasses.field(default_factory=list)
    out_of_bounds: list = dataclasses.field(default_factory=list)
    roundings: list = dataclasses.field(default_factory=list)
    dot_flops: dict = dataclasses.field(default_factory=dict)  # kernel → FLOPs of its tl.dot
    products: dict = dataclasses.field(default_factory=dict)  # Site of a tl.dot → (M, N)
    comparisons: dict = dataclasses.field(default_factory=dict)  # Site → shape, of 2-D integer
    # comparisons: the masks a kernel builds from positions (a causal mask, i >= j)

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
        extents = {name: _extent(tensor) for name, tensor in tensors.items()}
        for access in self.accesses:
            addresses = access.addresses
            for name, (start, end) in extents.items():
                inside = (addresses >= start) & (addresses < end)
                if inside.any():
                    flat = (addresses[inside] - start) // tensors[name].element_size()
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
def record(bounds=None, *, undefined=None, exact=False, limit=None):
    """Record what interpreted kernels do inside the block; yields the `Trace`.

    bounds: optional {name: tensor}, the memory the kernels may touch. Accesses outside it are
    recorded in `Trace.out_of_bounds` and masked off (a load gets the `other` value).
    undefined: optional float that masked-off lanes of a load without a value of its own read.
    exact: casts to a narrower float keep the value (they are still listed in `roundings`).
    limit: optional number of loads, stores and products after which a program is stopped with
    `Runaway` (a loop that never ends would otherwise fill the memory with its trace).
    """
    if not INTERPRETED:
        raise RuntimeError(
            "linattn_core.kernels.tools.trace watches the Triton interpreter: set "
            "TRITON_INTERPRET=1 before triton is first imported"
        )
    trace, running = Trace(), []
    extents = {name: _extent(t) for name, t in (bounds or {}).items()}
    builder = interpreter.InterpreterBuilder
    run, dot = interpreter.InterpretedFunction.run, builder.create_dot
    load, store = builder.create_masked_load, builder.create_masked_store
    atomic, binary = builder.create_atomic_rmw, builder.binary_op

    def traced_run(self, *args, **kwargs):
        running.append(self.fn.__name__)
        try:
            return run(self, *args, **kwargs)
        finally:
            running.pop()

    events = [None, 0]  # the program running, and the loads, stores and products it made

    def count(builder_self):
        """Stop a program that makes more than `limit` loads, stores and products."""
        program = (running[-1], tuple(builder_self.grid_idx))
        events[:] = [program, events[1] + 1 if events[0] == program else 1]
        if limit is not None and events[1] > limit:
            raise Runaway(
                f"more than {limit:,} loads, stores and products in one program without finishing"
            )

    def where(builder_self):
        """(program, site) of the kernel line that is calling into the interpreter."""
        frame = _kernel_frame(sys._getframe(2))
        site = site_of(frame.f_code, frame.f_lasti, frame.f_lineno) if frame else Site("?", 0, "?")
        return _program(builder_self.grid_idx, builder_self.grid_dim), site

    def note(builder_self, op, ptrs, given, undefined_lanes=0):
        """Record one access; return the lanes it may touch (out-of-bounds ones switched off)."""
        itemsize = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        tile = np.asarray(ptrs.data).astype(np.uint64)
        allowed = np.broadcast_to(given, tile.shape).copy()
        via = _VIA.get(sys._getframe(2).f_code.co_name, "pointers")
        program, site = where(builder_self)
        if extents and allowed.any():
            owner = _owner(extents, int(tile[allowed].min()))
            if owner is None:
                outside = allowed.copy()
            else:
                start, end = extents[owner]
                outside = allowed & ((tile < start) | (tile >= end))
            if outside.any():
                first = int(tile[outside][0])
                name, past = _nearest(
                    {owner: extents[owner]} if owner else extents, first, itemsize
                )
                masked = not np.all(given)
                trace.out_of_bounds.append(
                    OutOfBounds(
                        running[-1], program, op, int(outside.sum()), name, past, site, via,
                        masked, tile[outside],
                    )
                )  # fmt: skip
                allowed &= ~outside
        count(builder_self)
        trace.accesses.append(
            Access(running[-1], program, op, tile, allowed, itemsize, site, via, undefined_lanes)
        )
        return interpreter.TensorHandle(allowed, tl.int1)

    def traced_load(self, ptrs, mask, other, *args, **kwargs):
        given = _lanes(mask)
        blank = 0
        element = ptrs.get_element_ty()
        dtype = interpreter._get_np_dtype(element)
        if other is None and undefined is not None and np.issubdtype(dtype, np.floating):
            blank = int(np.size(given) - np.count_nonzero(given))
            if blank:
                other = interpreter.TensorHandle(
                    np.full(ptrs.data.shape, undefined, dtype), element
                )
        allowed = note(self, "load", ptrs, given, blank)
        return load(self, ptrs, allowed, other, *args, **kwargs)

    def traced_store(self, ptrs, value, mask, *args, **kwargs):
        return store(self, ptrs, value, note(self, "store", ptrs, _lanes(mask)), *args, **kwargs)

    def traced_dot(self, a, b, *args, **kwargs):
        (m, k), n = a.data.shape[-2:], b.data.shape[-1]
        name = running[-1]
        count(self)
        trace.dot_flops[name] = trace.dot_flops.get(name, 0) + 2 * m * n * k
        trace.products.setdefault(where(self)[1], (m, n))
        return dot(self, a, b, *args, **kwargs)

    def traced_atomic(self, operation, ptrs, value, mask, *args, **kwargs):
        allowed = note(self, "atomic", ptrs, _lanes(mask))
        return atomic(self, operation, ptrs, value, allowed, *args, **kwargs)

    def traced_binary(self, lhs, rhs, operation):
        result = binary(self, lhs, rhs, operation)
        if (
            operation in _COMPARISONS
            and np.ndim(result.data) == 2
            and np.issubdtype(np.asarray(lhs.data).dtype, np.integer)
        ):
            trace.comparisons.setdefault(where(self)[1], np.shape(result.data))
        return result

    def rounding(cast):
        def traced_cast(self, src, dst_type, *args, **kwargs):
            source, target = src.dtype.scalar, dst_type.scalar
            if (
                source.is_floating()
                and target.is_floating()
                and target.primitive_bitwidth < source.primitive_bitwidth
            ):
                program, site = where(self)
                trace.roundings.append(Rounding(running[-1], program, site, target.name))
                if exact:
                    return src
            return cast(self, src, dst_type, *args, **kwargs)

        return traced_cast

    patches = (
        (interpreter.InterpretedFunction, "run", traced_run),
        (builder, "create_masked_load", traced_load),
        (builder, "create_masked_store", traced_store),
        (builder, "create_dot", traced_dot),
        (builder, "create_atomic_rmw", traced_atomic),
        (builder, "binary_op", traced_binary),
        (builder, "cast_impl", rounding(builder.cast_impl)),
        (builder, "create_fp_to_fp", rounding(builder.create_fp_to_fp)),
    )
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, patched in patches:
            setattr(owner, name, patched)
        yield trace
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


class Runaway(RuntimeError):
    """A program made more loads, stores and products than `record(limit=...)` allows."""


def _lanes(mask):
    """A mask as a bool array: a TensorHandle (pointer loads) or an array (block pointers,
    tensor descriptors)."""
    return np.asarray(getattr(mask, "data", mask)).astype(bool)


def _kernel_frame(frame):
    """The innermost frame, from `frame` outwards, that runs a kernel's own code."""
    while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY):
        frame = frame.f_back
    return frame


def kernel_site(error):
    """The `Site` of the kernel line that an exception raised in an interpreted kernel came
    from (the innermost frame of its traceback outside the interpreter), or None."""
    cause = error.__cause__ or error
    found = None
    traceback = cause.__traceback__
    while traceback is not None:
        if not traceback.tb_frame.f_code.co_filename.startswith(_MACHINERY):
            found = site_of(traceback.tb_frame.f_code, traceback.tb_lasti, traceback.tb_lineno)
        traceback = traceback.tb_next
    return found


@functools.lru_cache(maxsize=4096)
def site_of(code, lasti, line):
    """The `Site` of the instruction at byte offset `lasti` (on `line`) of a code object: the
    source of the expression it evaluates, a call spread over lines joined into one (on Python
    3.10, which does not record columns, the whole line)."""
    lines = linecache.getlines(code.co_filename)
    if not 0 < line <= len(lines):
        return Site(code.co_filename, line, "?")
    positions = code.co_positions() if hasattr(code, "co_positions") else iter(())
    start, end_line, column, end_column = next(
        itertools.islice(positions, lasti // 2, None), (None, None, None, None)
    )
    if start != line or end_line is None or column is None or end_line > len(lines):
        return Site(code.co_filename, line, " ".join(lines[line - 1].split()))
    text = "".join(lines[line - 1 : end_line]).encode()  # columns count UTF-8 bytes
    end = len(text) - len(lines[end_line - 1].encode()) + end_column
    return Site(code.co_filename, line, " ".join(text[column:end].decode().split()))


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
