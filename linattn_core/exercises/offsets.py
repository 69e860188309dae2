"""Offsets of the wrong size: how the accesses of one kernel line move from program to program.

A line such as `tl.load(v + head * N * D + rows[:, None] * DV + …)` runs once in every program
(and once a step in a loop). Where its tile starts, compared between two programs that differ in
one id, is the distance the kernel put between heads, chunks or tiles; the step between a tile's
rows is the distance it put between rows. `anomaly` compares these with the puzzle's layout
and names the size used in place of the right one (N·D for N·DV, …), or swapped program ids;
`explain` says so, with the fix and the lines that build that distance (`builders`: the
statement that adds `head * N * D`, spreads rows with `rows[:, None] * D`, or reads the program
ids). Every function takes a `diagnoses.Evidence`.
"""

import ast

import numpy as np

from linattn_core.exercises.layouts import evaluate, listed, name_of


def lines(evidence):
    """(site, tensor) of every load and store line, in the order they first ran."""
    return list(dict.fromkeys((a.site, evidence.owner(a)) for a in evidence.trace.accesses))


def anomaly(evidence, site, name):
    """(part, used, right) for the distance that puts the accesses of `site` to `name` where
    they are, when it is not the right one: part "row", "head", "unit", "first row" or
    "swapped", used and right as expressions; None when all are right or none can be named."""
    puzzle, sizes = evidence.puzzle, evidence.sizes
    layout, tile = puzzle.layouts[name], puzzle.tile
    right = layout.strides(tile)
    group = [a for a in evidence.trace.accesses if a.site == site and evidence.owner(a) == name]
    if not group:
        return None
    bases = {}
    for access in group:
        bases.setdefault(access.program, []).append(evidence.base(access, name))
    unit_axis = next((axis for axis in puzzle.grid if axis in ("chunk", "tile")), None)
    moves = {
        "row": _row_step(group[0]),
        "head": _move(evidence, bases, "head"),
        "unit": _move(evidence, bases, unit_axis) if unit_axis else _step(bases),
    }
    values = {part: evaluate(e, sizes) for part, e in right.items()}
    if "head" in puzzle.grid and unit_axis and _swapped(moves, values):
        return ("swapped", None, None)
    width = evaluate(layout.width, sizes)
    for part in ("row", "head", "unit"):
        move = moves[part]
        if move is None or move == values[part]:
            continue
        if part == "unit" and unit_axis is None and layout.kind == "rows" and move == width:
            continue  # a walk may go row by row
        if part == "unit" and layout.kind == "rows" and move % width == 0:
            first = name_of(move // width, (tile, "D", "DV", "1", "0"), sizes)
            if first:
                return ("first row", first, tile)
        used = name_of(move, layout.wrong(part, tile), sizes)
        if used:
            return (part, used, right[part])
    return None


def _swapped(moves, values):
    """Whether the head and unit ids move the accesses as the other should: each by the
    other's distance (one of the two unknown at most); a head moved by a unit's distance while
    the unit id moves right is a wrong head distance instead."""
    head, unit = moves["head"], moves["unit"]
    return (head, unit) in (
        (values["unit"], values["head"]),
        (values["unit"], None),
        (None, values["head"]),
    )


def places_with(evidence, found):
    """Every (site, tensor) whose offsets have the anomaly `found`: the same part, the same size
    used in its place."""
    places = []
    for site, name in lines(evidence):
        other = anomaly(evidence, site, name)
        if other and other[:2] == found[:2]:
            places.append((site, name))
    return places


def explain(evidence, places, part, used, right):
    """The anomaly in words, for the tensors and lines of `places`."""
    message = _words(evidence, places, part, used, right)
    overwritten = _overwritten(evidence, dict.fromkeys(name for _, name in places))
    if overwritten:
        message += f" (programs overwrite each other's {listed(overwritten)})"
    return message


def at_lines(sites):
    """ "line 12, `code`" for one site, "lines 12, 14 and 15" for several."""
    sites = list(dict.fromkeys(sites))
    if len(sites) == 1:
        return str(sites[0])
    return "lines " + listed([str(s.line) for s in sorted(sites, key=lambda s: s.line)])


def builders(evidence, places, part, used):
    """The Sites of the statements that build the `part` of the offsets of `places` (the line
    `q += head * C * D` for a head distance, `ptrs = rows[:, None] * D + …` for a row, the
    `tl.program_id` lines for swapped ids), or the load and store lines where no other does
    (or where the distance is missing, `used` "0")."""
    found = []
    for site, _ in places:
        source = evidence.source(site)
        if not source.found or used == "0":
            found.append(site)
            continue
        if part == "swapped":
            picked = [s for s in source.statements if _program_ids_only(s)]
        else:
            picked = [
                s
                for s in source.address(site)
                if not _program_ids_only(s) and _builds(source, s, part, evidence)
            ]
        found += [source.site(s) for s in picked] or [site]
    return list(dict.fromkeys(found))


def _program_ids_only(statement):
    """Whether a statement assigns program ids and nothing else (`t, b = tl.program_id(0), …`)."""
    if not isinstance(statement, ast.Assign):
        return False
    values = statement.value.elts if isinstance(statement.value, ast.Tuple) else [statement.value]
    return all(
        isinstance(v, ast.Call) and getattr(v.func, "attr", None) == "program_id" for v in values
    )


def _builds(source, statement, part, evidence):
    """Whether a statement of an address builds the distance `part` of it."""
    grid = evidence.puzzle.grid
    if part == "row":
        return source.builds_rows(statement)
    axis = "head" if part == "head" else next((a for a in grid if a in ("chunk", "tile")), None)
    if axis is None:  # a walk: the loop moves the rows (a counter's `t += 1` is not the line)
        return (
            source.in_loop(statement)
            and not source.counts(statement)
            and (source.mentions(statement, source.loop_names()) or source.updates(statement))
        )
    index = grid.index(axis)
    return source.mentions(statement, source.program_ids(index), index)


def _words(evidence, places, part, used, right):
    puzzle = evidence.puzzle
    names = list(dict.fromkeys(name for _, name in places))
    subject, sites = listed(names), at_lines(builders(evidence, places, part, used))
    kind, tile = puzzle.layouts[names[0]].kind, puzzle.tile
    walk = not any(axis in puzzle.grid for axis in ("chunk", "tile"))
    t = "p" if "tile" in puzzle.grid else "t"  # the program id, as the puzzle names it
    if part == "swapped":
        return (
            f"{subject} {'is' if len(names) == 1 else 'are'} addressed with the program ids "
            f"swapped ({sites}): the grid is (NT, BH), so t = tl.program_id(0) and "
            "head = tl.program_id(1)"
        )
    if part == "first row":
        if walk and used == "0":
            return f"the loop never moves {subject} ({sites}): advance it by {tile} rows"
        if walk:
            return (
                f"each step of the loop moves {subject} by {used} rows ({sites}), but a chunk "
                f"has {tile} rows: advance by {tile} rows"
            )
        if used == "0":
            return f"every program starts {subject} at row 0 ({sites}): the first row is {t}·{tile}"
        return (
            f"program {t} starts {subject} at row {t}·{used} ({sites}), but a "
            f"{'tile' if t == 'p' else 'chunk'} has {tile} rows: its first row is {t}·{tile}"
        )
    rights = {n: puzzle.layouts[n].strides(tile)[part] for n in names}
    per_name = _per_name(rights)
    if part == "row":
        vias = {a.via for a in evidence.trace.accesses if (a.site, evidence.owner(a)) in places}
        fix = f"rows[:, None] * {per_name}" if vias == {"pointers"} else f"strides ({per_name}, 1)"
        if kind == "states":
            fix = "state[d, e] is d·DV + e elements in"
        return (
            f"the rows of {subject} are addressed {used} elements apart ({sites}), but a row "
            f"holds {per_name}: {fix}"
        )
    if part == "head":
        fixes = ", ".join(f"{n} + head·{rights[n]}" for n in names)
        if used == "0":
            return (
                f"every program addresses head 0 of {subject} ({sites}): move the pointers to "
                f"the program's own head first, {fixes}"
            )
        return (
            f"head b of {subject} is addressed at b·{used} ({sites}), but heads are {per_name} "
            f"elements apart: {fixes}"
        )
    takes = {"rows": f"{tile} rows take", "states": "a state takes", "blocks": "a block takes"}
    if walk and used == "0":
        return f"the loop never moves {subject} ({sites}): advance it by {per_name} each step"
    if walk:
        return (
            f"each step of the loop moves {subject} by {used} elements ({sites}), but "
            f"{takes[kind]} {per_name}"
        )
    first = f"its first row is {t}·{tile}" if kind == "rows" else f"it starts at {t}·{right}"
    if used == "0":
        return f"every program addresses the start of {subject} ({sites}): {first}"
    return (
        f"program {t} addresses {subject} at {t}·{used} ({sites}), but {takes[kind]} "
        f"{per_name} elements: {first}"
    )


def _move(evidence, bases, axis):
    """How far a line's first access moves per step of the program id `axis`."""
    if axis not in evidence.puzzle.grid:
        return None
    for program, offsets in bases.items():
        ids = evidence.ids(program)
        if ids[axis] == 0:
            continue
        twin = next((p for p in bases if evidence.ids(p) == {**ids, axis: 0}), None)
        if twin is not None:
            distance = offsets[0] - bases[twin][0]
            return distance // ids[axis] if distance % ids[axis] == 0 else None
    return None


def _step(bases):
    """How far a line's accesses move from one step of a loop to the next (in the first
    program that ran it twice), or None."""
    for offsets in bases.values():
        if len(offsets) > 1:
            return offsets[1] - offsets[0]
    return None


def _row_step(access):
    """The distance in elements between the rows of a 2-D tile (the step that is not 1), or
    None when the tile has no such pair of steps."""
    tile = access.tile.astype(np.int64)
    origin = tile[(0,) * tile.ndim]
    steps = []
    for axis, size in enumerate(tile.shape):
        if size > 1:
            index = tuple(1 if a == axis else 0 for a in range(tile.ndim))
            steps.append(int(tile[index] - origin) // access.itemsize)
    if len(steps) != 2 or 1 not in steps:
        return None
    steps.remove(1)
    return steps[0]


def _overwritten(evidence, names):
    """Those of `names` that two programs wrote to the same element of."""
    found = []
    for name in names:
        tensor = evidence.inputs[name]
        writer = np.full(tensor.numel(), -1)
        programs = {}
        for access, _, flat in evidence.trace.locate({name: tensor}):
            if access.op == "load":
                continue
            number = programs.setdefault(access.program, len(programs))
            if ((writer[flat] != -1) & (writer[flat] != number)).any():
                found.append(name)
                break
            writer[flat] = number
    return found


def _per_name(expressions):
    """{name: expression} in words: "N·D" when all agree, else "N·D for q and k, N·DV for v"."""
    groups = {}
    for name, expression in expressions.items():
        groups.setdefault(expression, []).append(name)
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join(f"{e} for {listed(names)}" for e, names in groups.items())
