"""Shape errors in tile shapes: what Triton raises for a `tl.dot` or a broadcast whose tiles do
not fit, said with the puzzle's sizes ([C, DV] rather than [16, 128]) and the likely fix.

Triton's messages ("input and other must have equal reduction dimensions", "Cannot
make_shape_compatible: …") name neither the tiles nor their sizes; the shapes are in the frame
that raised (`a_shape`, `b_shape` in `tl.dot`, `lhs_shape`, `rhs_shape` in a broadcast).
"""

import ast

_DOT = ("a_shape", "b_shape")
_BROADCAST = ("lhs_shape", "rhs_shape")


def mismatch(error, site, sizes):
    """The message for a shape error raised on `site`, or None when `error` is not one."""
    frame = _innermost(error)
    if frame is None or site is None:
        return None
    found = frame.f_locals
    if all(k in found for k in _DOT):
        first, second = (_ints(found[k]) for k in _DOT)
        return _dot(site, first, second, sizes)
    if all(k in found for k in _BROADCAST):
        first, second = (_ints(found[k]) for k in _BROADCAST)
        return _broadcast(site, first, second, sizes)
    return None


def named(shape, sizes):
    """[16, 128] as "[C, DV]": each size by the first name it has in `sizes`."""
    names = {value: name for name, value in reversed(list(sizes.items()))}
    return "[" + ", ".join(names.get(n, str(n)) for n in shape) + "]"


def _dot(site, first, second, sizes):
    a, b = _operands(site, ("a", "b"))
    if len(first) != len(second) or len(first) < 2:
        return (
            f"line {site.line}, `{site.code}`, multiplies {a} {named(first, sizes)} by {b} "
            f"{named(second, sizes)}, but tl.dot takes two tiles of the same rank, 2 or 3"
        )
    (m, k), (k2, n) = first[-2:], second[-2:]
    fixes = [
        fix
        for fix, fits in (
            (f"tl.dot({a}, tl.trans({b}))", k == n),
            (f"tl.dot({b}, {a})", n == m),
            (f"tl.dot(tl.trans({a}), {b})", m == k2),
        )
        if fits
    ]
    told = f": {fixes[0]}?" if fixes else ""
    return (
        f"line {site.line}, `{site.code}`, multiplies {a} {named(first, sizes)} by {b} "
        f"{named(second, sizes)}, but the columns of the first ({named([k], sizes)[1:-1]}) "
        f"must match the rows of the second ({named([k2], sizes)[1:-1]}){told}"
    )


def _broadcast(site, first, second, sizes):
    axis = next(i for i, (x, y) in enumerate(zip(first, second, strict=True)) if 1 != x != y != 1)
    left, right = (named([s[axis]], sizes)[1:-1] for s in (first, second))
    a, b = _operands(site, ("a", "b"))
    tiles = (f"{a} {named(first, sizes)}", f"{b} {named(second, sizes)}")
    if a == "a":  # not a binary operator: the tiles have no names of their own
        tiles = (f"a {named(first, sizes)} tile", f"a {named(second, sizes)} tile")
    fix = ""
    for operand, shape, other in ((b, second, first), (a, first, second)):
        if len(shape) == 2 and _fits(shape[::-1], other):
            if a == "a":
                fix = f"; turn the {named(shape, sizes)} tile around with tl.trans"
                break
            turned = operand.replace("[:, None]", "[None, :]")
            fix = f"; turn {operand} around: {turned if turned != operand else 'tl.trans'}"
            fix += f"({operand})" if turned == operand else ""
            break
    return (
        f"line {site.line}, `{site.code}`, combines {tiles[0]} with {tiles[1]}, which do not "
        f"broadcast (axis {axis}: {left} against {right}){fix}"
    )


def _fits(first, second):
    """Whether two shapes broadcast together."""
    pairs = zip(first, second, strict=False)
    return len(first) == len(second) and all(1 in (x, y) or x == y for x, y in pairs)


def _innermost(error):
    traceback = error.__traceback__
    if traceback is None:
        return None
    while traceback.tb_next is not None:
        traceback = traceback.tb_next
    return traceback.tb_frame


def _ints(shape):
    return [int(getattr(s, "value", s)) for s in shape]


def _operands(site, default):
    """The source of the two operands of the expression a Site shows: `tl.dot(a, b)`'s first
    two arguments, `a * b`'s sides; `default` for anything else."""
    try:
        node = ast.parse(site.code, mode="eval").body
    except SyntaxError:
        return default
    if isinstance(node, ast.BinOp):
        return ast.unparse(node.left), ast.unparse(node.right)
    if isinstance(node, ast.Call) and len(node.args) >= 2 and "dot" in ast.unparse(node.func):
        return tuple(ast.unparse(arg) for arg in node.args[:2])
    return default
