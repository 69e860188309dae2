"""What a failed puzzle kernel did wrong, read from the evidence of its trace.

`Evidence` holds one run of a reader's kernel: the puzzle, the problem, the tensors and the
`Trace` of every load and store. Each diagnosis looks for one kind of evidence and, when it finds
it, says in a sentence or two what the kernel did, the line that did it and the likely fix:

- `out_of_bounds`: rows past N (a missing or wrong mask, and the line that builds it; a block
  pointer without a boundary check) or a wrong address (which size the kernel used in place of
  the right one);
- `flat_mask`: a mask that compares flat offsets (row·D + column) with N, not rows;
- `undefined`: NaN from masked-off lanes that the kernel gave no value (`other=`), confirmed by a
  run in which they read 0;
- `misplaced`: a program that loaded or stored rows, heads or blocks of another program, and why;
- `misaddressed`: a head, chunk or row offset that is a wrong size, or swapped program ids
  (`offsets`);
- `imprecise`: a kernel that is right without its roundings to a 16-bit float (every cast).
"""

import numpy as np
import torch

from linattn_core.exercises import offsets, shapes
from linattn_core.exercises.layouts import listed, spans, where
from linattn_core.exercises.sources import Source
from linattn_core.kernels.tools.trace import Runaway, kernel_site

RTOL = 1e-4  # float32 products against float64 references: far below any real mistake

_FLOATS = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def relative_error(got, want):
    """‖got − want‖ / ‖want‖ in float64 (0 when both are zero; NaN when got has NaN)."""
    got, want = got.double(), want.double()
    scale = want.norm()
    return float((got - want).norm() / scale) if scale > 0 else float(got.norm())


def close(got, want):
    return relative_error(got, want) <= RTOL


def raised(error, sizes):
    """The exception a kernel raised, and the kernel line it came from; a shape error in tile
    shapes (`shapes.mismatch`), the sizes named as in `sizes` ({"C": 16, …})."""
    cause = error.__cause__ or error
    site = kernel_site(error)
    text = str(cause).strip().splitlines()
    at = f" at {site}" if site else ""
    if isinstance(cause, Runaway):
        return f"the kernel made {cause}, the last{at}: does a loop never end?"
    mismatch = shapes.mismatch(cause, site, sizes)
    if mismatch:
        return mismatch
    return f"the kernel raised {type(cause).__name__}{at}: {text[0] if text else '(no message)'}"


class Evidence:
    """One run of a kernel on one problem: the tensors it was given and its trace."""

    def __init__(self, puzzle, problem, inputs, trace):
        self.puzzle, self.problem, self.inputs, self.trace = puzzle, problem, inputs, trace
        self.sizes = puzzle.symbols(problem)
        self.starts = {name: t.data_ptr() for name, t in inputs.items()}
        self._owners = {}  # id(access) → tensor name
        self._sources = {}  # path → Source

    def source(self, site):
        """The kernel's source (`sources.Source`) that a Site is in."""
        if site.path not in self._sources:
            self._sources[site.path] = Source(site)
        return self._sources[site.path]

    def sites(self, op, name):
        """The Sites of the loads or stores (`op`) of a tensor, in the order they first ran."""
        return list(
            dict.fromkeys(
                a.site for a in self.trace.accesses if a.op == op and self.owner(a) == name
            )
        )

    # --- where an access landed ------------------------------------------------------------
    def ids(self, program):
        """{"chunk": t, "head": b, …}: a program's ids by what the grid's axes mean."""
        padded = tuple(program) + (0,) * (len(self.puzzle.grid) - len(program))
        return dict(zip(self.puzzle.grid, padded, strict=True))

    def tensor(self, addresses):
        """The tensor that holds the lowest address, or the one nearest to it."""
        lowest = int(addresses.min())

        def distance(name):
            tensor = self.inputs[name]
            end = self.starts[name] + tensor.numel() * tensor.element_size()
            return max(self.starts[name] - lowest, lowest - end + 1, 0)

        return min(self.inputs, key=distance)

    def owner(self, access):
        """The tensor an access belongs to: the one its lanes touched; for a tile whose lanes
        were all masked off, the one the same line touched in other programs."""
        if id(access) not in self._owners:
            if access.allowed.any():
                found = self.tensor(access.addresses)
            else:
                touched = (a for a in self.trace.accesses if a.site == access.site)
                found = next(
                    (self.tensor(a.addresses) for a in touched if a.allowed.any()),
                    self.tensor(access.tile),
                )
            self._owners[id(access)] = found
        return self._owners[id(access)]

    def flat(self, name, addresses):
        """Element offsets from the start of a tensor (negative before it, past its end after)."""
        size = self.inputs[name].element_size()
        return (addresses.astype(np.int64) - self.starts[name]) // size

    def base(self, access, name):
        """The offset of the tile's lowest lane, masked or not: where its pointers start."""
        return int(self.flat(name, access.tile.min().reshape(1))[0])

    def _split(self, name, flat):
        return self.puzzle.layouts[name].split(flat, self.sizes, self.puzzle.tile)

    def outside_own(self, program, name, flat):
        """The offsets (a bool per offset) outside the program's own head, rows or block."""
        ids, layout = self.ids(program), self.puzzle.layouts[name]
        head, unit = self._split(name, flat)
        outside = head != ids.get("head", 0)
        own_unit = ids.get("chunk", ids.get("tile"))
        if own_unit is not None and layout.kind != "states":
            outside |= unit != own_unit
        return outside

    def past_n(self, program, name, flat):
        """The rows of the program's own head (and chunk) past N that the offsets address, or
        None when some offset lies elsewhere."""
        layout = self.puzzle.layouts[name]
        if layout.kind != "rows":
            return None
        ids, n, tile = self.ids(program), self.sizes["N"], self.sizes[self.puzzle.tile]
        width = self.sizes[layout.width]
        rows = (flat - ids.get("head", 0) * n * width) // width
        own_unit = ids.get("chunk", ids.get("tile"))
        past = (rows >= n) & (rows < self.sizes["NT"] * tile if own_unit is None else True)
        if own_unit is not None:
            past &= rows // tile == own_unit
        return sorted(set(rows.tolist())) if past.all() else None

    # --- the diagnoses ---------------------------------------------------------------------
    def out_of_bounds(self, event):
        name = event.nearest
        flat = self.flat(name, event.addresses)
        rows = self.past_n(event.program, name, flat)
        if rows is not None:
            return self._past_n_message(event, name, rows, event.masked)
        anomaly = offsets.anomaly(self, event.site, name)
        if anomaly:
            return offsets.explain(self, offsets.places_with(self, anomaly), *anomaly)
        if event.elements_past < 0:
            where = f"{-event.elements_past} elements before the start of {name}"
        else:
            where = f"{event.elements_past} elements past the end of {name}"
        return (
            f"{self._program(event.program)} {event.op}s {event.count} elements outside the "
            f"tensors, from {where} ({event.site}): the address is wrong; {self._layout(name)}"
        )

    def undefined(self, name, rerun):
        blank = [a for a in self.trace.accesses if a.op == "load" and a.undefined]
        got = self.inputs[name]
        stored = self._stored(name)
        poisoned = got.isnan() & stored
        if not blank or not poisoned.any():
            return None
        if rerun(undefined=0.0)[name][stored].isnan().any():
            return None  # the NaN has another cause
        sites = list(dict.fromkeys(a.site for a in blank))
        by_pointer = any(a.via == "block pointer" for a in blank)
        fix = 'padding_option="zero"' if by_pointer else "other=0.0"
        missing = "padding_option" if by_pointer else "other="
        loads = "the load at" if len(sites) == 1 else "the loads at"
        has = "has" if len(sites) == 1 else "have"
        return (
            f"{name}: {where(poisoned, self.problem, self.puzzle.unit)} NaN: {loads} "
            f"{offsets.at_lines(sites)} {has} no {missing}, so masked-off lanes are undefined (NaN "
            f"here) and reach the result: give {'it' if len(sites) == 1 else 'them'} {fix}"
        )

    def flat_mask(self):
        """A load or store whose mask compares flat offsets (row·width + column) with N: it
        keeps the first N elements of a head rather than its first N rows."""
        for access in self.trace.accesses:
            if access.via != "pointers" or access.allowed.all():
                continue
            name = self.owner(access)
            layout = self.puzzle.layouts[name]
            if layout.kind != "rows":
                continue
            width = self.sizes[layout.width]
            head = self.ids(access.program).get("head", 0)
            within = self.flat(name, access.tile.reshape(-1)) - head * self.sizes["N"] * width
            allowed, n = access.allowed.reshape(-1), self.sizes["N"]
            if (allowed == (within < n)).all() and (~allowed & (within // width < n)).any():
                built = self.source(access.site).mask(access.site) or access.site
                return (
                    f"the mask of the {access.op} of {name} keeps the first N "
                    f"elements, not the first N rows: it compares a flat offset, row·{layout.width}"
                    f" + column, with N ({built}); compare the row alone, rows[:, None] < N"
                )
        return None

    def misplaced(self, outputs):
        accesses = sorted(self.trace.accesses, key=lambda a: a.op == "load")  # writes first
        for access in accesses:
            if not access.allowed.any():
                continue
            name = self.owner(access)
            if access.op != "load" and name not in outputs:
                return (
                    f"{self._program(access.program)} stores into {name}, an input "
                    f"({access.site}): the result goes to {listed(outputs)}"
                )
            flat = self.flat(name, access.addresses)
            outside = self.outside_own(access.program, name, flat)
            if not outside.any():
                continue
            rows = self.past_n(access.program, name, flat[outside])
            if rows is not None:
                return self._past_n_message(access, name, rows, not access.allowed.all())
            anomaly = offsets.anomaly(self, access.site, name)
            if anomaly:
                return offsets.explain(self, offsets.places_with(self, anomaly), *anomaly)
            touched = self._describe(name, flat[outside])
            return (
                f"{self._program(access.program)} {access.op}s {touched} ({access.site}), which "
                f"are not its own: {self._layout(name)}"
            )
        return None

    def misaddressed(self):
        for site, name in offsets.lines(self):
            anomaly = offsets.anomaly(self, site, name)
            if anomaly:
                return offsets.explain(self, offsets.places_with(self, anomaly), *anomaly)
        return None

    def imprecise(self, name, want, rerun):
        if not self.trace.roundings:
            return None
        if not close(rerun(exact=True)[name], want):
            return None
        casts = {}  # float type → the Sites that round to it
        for rounding in self.trace.roundings:
            casts.setdefault(_FLOATS.get(rounding.dtype, rounding.dtype), {})[rounding.site] = 1
        where = listed(
            f"{dtype} at {listed(str(site) for site in sites)}" for dtype, sites in casts.items()
        )
        those = "that rounding" if sum(map(len, casts.values())) == 1 else "those roundings"
        error = relative_error(self.inputs[name], want)
        dot = " (tl.dot accumulates in float32 either way)" if self.trace.flops() else ""
        return (
            f"{name} is off by {error:.1e}: the kernel rounds to {where}, and without "
            f"{those} it is right; keep the tiles in float32{dot}"
        )

    def line(self, look_at):
        """The Site of the line a typical mistake is on (see `checks.Mistake`), or None."""
        sizes, tile = self.sizes, self.sizes[self.puzzle.tile]
        if isinstance(look_at, list):  # alternatives: the first that is in the kernel
            return next(filter(None, map(self.line, look_at)), None)
        if look_at == "reset":
            first = next(iter(self.trace.accesses), None)
            resets = self.source(first.site).resets() if first else []
            return resets[0] if resets else None
        if isinstance(look_at, tuple) and look_at[0] in ("value", "denominator"):
            kind, name = look_at
            stores = self.sites("store", name)
            source = self.source(stores[0]) if stores else None
            if source is None or not source.found:
                return stores[0] if stores else None
            return getattr(source, kind)(stores[0]) or stores[0]
        if isinstance(look_at, tuple) and look_at[0] == "misread":
            _, name, meant = look_at  # the loads of `name`: the one assigned to a name like `meant`
            loads = self.sites("load", name)
            named = [s for s in loads if any(meant in t for t in self.source(s).target(s))]
            return (named or loads or [None])[0]
        if look_at == "mask":
            found = (s for s, shape in self.trace.comparisons.items() if shape == (tile, tile))
        elif look_at in ("state", "scores"):
            shapes = {(tile, tile)}
            if look_at == "state":
                shapes = {(sizes["D"], sizes.get("DV")), (sizes.get("DV"), sizes["D"])}
            found = (s for s, shape in self.trace.products.items() if shape in shapes)
        elif look_at:
            op, name = look_at
            found = (a.site for a in self.trace.accesses if a.op == op and self.owner(a) == name)
        else:
            return None
        return next(found, None)

    # --- words ------------------------------------------------------------------------------
    def _past_n_message(self, access, name, rows, masked):
        ids = self.ids(access.program)
        head = ids.get("head", 0)
        of_head = f" of head {head}" if "head" in self.puzzle.grid else ""
        spill = ""
        if head + 1 < self.problem.heads:
            spill = f", which are head {head + 1}'s"
        if access.via == "tensor descriptor":
            fix = "the descriptor must end at row N of the head: its base at the head, shape [N, …]"
        elif access.via == "block pointer":
            fix = "add the row dimension to its boundary_check"
            fix += ' (and padding_option="zero")' if access.op == "load" else ""
        elif masked:
            them = "it" if len(rows) == 1 else "them"
            built = self.source(access.site).mask(access.site)
            mask = f" ({built})" if built and built.line != access.site.line else ""
            fix = f"its mask{mask} lets {them} through: mask the {access.op} with rows < N"
        else:
            fix = f"mask the {access.op} with rows < N"
        if access.op == "load" and access.via == "pointers":
            fix += " (other=0.0)"
        noun = "row" if len(rows) == 1 else "rows"
        return (
            f"{self._program(access.program)} {access.op}s {noun} {spans(rows)}{of_head} of "
            f"{name}, past N = {self.sizes['N']}{spill} ({access.site}): {fix}"
        )

    def _program(self, program):
        return f"program {program[0] if len(program) == 1 else program}"

    def _describe(self, name, flat):
        head, unit = self._split(name, flat)
        kind = self.puzzle.layouts[name].kind
        if kind == "blocks":
            return f"the score blocks {spans(unit.tolist())} of {name}"
        heads = spans(head.tolist())
        if kind == "states":
            return f"states at boundaries {spans(unit.tolist())} of head {heads} of {name}"
        width = self.sizes[self.puzzle.layouts[name].width]
        rows = (flat - head * self.sizes["N"] * width) // width
        of_head = f" of head {heads}" if "head" in self.puzzle.grid else ""
        return f"rows {spans(rows.tolist())}{of_head} of {name}"

    def _layout(self, name):
        """Where a tensor's elements are, in the kernel's names."""
        layout = self.puzzle.layouts[name]
        strides = layout.strides(self.puzzle.tile)
        if layout.kind == "blocks":
            return f"the block of chunk t starts t·{strides['unit']} elements into {name}"
        head = f"head b of {name} starts b·{strides['head']} elements in, its"
        if layout.kind == "states":
            return f"{head} state t t·{strides['unit']} further"
        if "head" not in self.puzzle.grid:
            return f"row i of {name} starts i·{strides['row']} elements in"
        return f"{head} row i i·{strides['row']} further"

    def _stored(self, name):
        tensor = self.inputs[name]
        stored = np.zeros(tensor.numel(), dtype=bool)
        for access, _, flat in self.trace.locate({name: tensor}):
            if access.op != "load":
                stored[flat] = True
        return torch.from_numpy(stored).reshape(tensor.shape)
