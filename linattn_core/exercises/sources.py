"""The lines of a kernel's source that build what one of its loads or stores uses.

A trace knows the line of each load and store; a mistake is often on another line: the one that
builds the offsets (`q += head * C * D`), the mask (`inside = rows < N`) or the value stored.
`Source` parses the kernel's function (from the file the trace's `Site`s name, as `linecache`
holds it, a notebook's cells included) and follows names back to the statements that assign
them. Everything here reads source text: it never runs the kernel.
"""

import ast
import functools
import linecache

from linattn_core.kernels.tools.trace import Site

_ZEROS = ("zeros", "zeros_like", "full")


@functools.lru_cache(maxsize=64)
def _parse(text):
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


class Source:
    """The function that holds `site`, parsed; `found` is false when it cannot be read."""

    def __init__(self, site):
        self.path = site.path
        self.text = "".join(linecache.getlines(site.path))
        tree = _parse(self.text) if self.text else None
        functions = [
            node
            for node in (ast.walk(tree) if tree else ())
            if isinstance(node, ast.FunctionDef) and node.lineno <= site.line <= node.end_lineno
        ]
        self.function = max(functions, key=lambda f: f.lineno, default=None)
        self.found = self.function is not None
        body = self.function.body if self.found else []
        self.statements = self._simple(body)
        self._loops = [n for s in body for n in ast.walk(s) if isinstance(n, (ast.For, ast.While))]

    # --- statements --------------------------------------------------------------------------
    def site(self, node):
        """The Site of a statement or expression: its first line and its code on one line."""
        code = ast.get_source_segment(self.text, node) or "?"
        return Site(self.path, node.lineno, " ".join(code.split()))

    def statement(self, line):
        """The simple statement that spans `line`, or None."""
        spanning = [s for s in self.statements if s.lineno <= line <= s.end_lineno]
        return spanning[-1] if spanning else None

    def call(self, site):
        """The call on `site`'s line whose code is the site's (a load or store), or None."""
        statement = self.statement(site.line)
        if statement is None:
            return None
        calls = [n for n in ast.walk(statement) if isinstance(n, ast.Call)]
        same = [c for c in calls if self.site(c).code == site.code]
        return (same or [c for c in calls if _name(c.func) in ("load", "store")] or [None])[0]

    def definitions(self, name, line):
        """The statements that give `name` the value it has on `line`: the last assignment
        before it, with the ones before that it builds on (`q += …`, `p = tl.advance(p, …)`),
        and, inside a loop, the updates later in the loop (they reach the next step)."""
        assigning = [s for s in self.statements if name in _targets(s)]
        before = [s for s in assigning if s.end_lineno < line]
        found = []
        for statement in reversed(before):
            found.append(statement)
            if not _builds_on(statement, name):
                break
        for loop in self._loops:
            if loop.lineno < line <= loop.end_lineno:
                found += [
                    s
                    for s in assigning
                    if s.lineno > line and s.end_lineno <= loop.end_lineno and _builds_on(s, name)
                ]
        return sorted(found, key=lambda s: s.lineno)

    def closure(self, node, line):
        """The statements that the names in `node` (on `line`) come from, and theirs, in order."""
        found, seen, pending = {}, set(), [(n, line) for n in _names(node)]
        while pending:
            name, at = pending.pop()
            if (name, at) in seen:
                continue
            seen.add((name, at))
            for statement in self.definitions(name, at):
                if id(statement) not in found:
                    found[id(statement)] = statement
                    value = getattr(statement, "value", None) or statement
                    pending += [(n, statement.lineno) for n in _names(value)]
        return sorted(found.values(), key=lambda s: s.lineno)

    # --- what a load or store uses ---------------------------------------------------------
    def address(self, site):
        """The statements that build the address of the load or store on `site`, its own
        statement last."""
        call = self.call(site)
        if call is None:
            return []
        parts = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "pointer")]
        if isinstance(call.func, ast.Attribute) and _name(call.func) in ("load", "store"):
            if _name(call.func.value) != "tl":  # a descriptor: desc.load([offsets])
                parts = [call.func.value, *call.args[:1]]
        own = self.statement(site.line)
        built = self.closure(ast.Tuple(elts=parts, ctx=ast.Load()), site.line)
        return [s for s in built if s is not own] + [own]

    def mask(self, site):
        """The Site of the statement that builds the mask of the load or store on `site` (its
        own when the mask is written in the call), or None when it has no mask."""
        call = self.call(site)
        if call is None:
            return None
        position = 2 if _name(call.func) == "store" else 1
        masks = [k.value for k in call.keywords if k.arg == "mask"] or call.args[position:][:1]
        if not masks:
            return None
        if isinstance(masks[0], ast.Name):
            built = self.definitions(masks[0].id, site.line)
            if built:
                return self.site(built[-1])
        return self.site(self.statement(site.line))

    def value(self, site):
        """The Site of the statement that computes what the store on `site` stores."""
        call = self.call(site)
        if call is None:
            return None
        values = [k.value for k in call.keywords if k.arg == "value"] or call.args[1:2]
        value = values[0] if values else None
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            value = value.func.value  # b_o.to(…), b_o.reshape(…): b_o
        if isinstance(value, ast.Name):
            built = self.definitions(value.id, site.line)
            if built:
                return self.site(built[-1])
        return self.site(self.statement(site.line))

    def denominator(self, site):
        """The Site of the statement that computes the denominator of what the store on `site`
        stores (the right side of its division), or None when it divides nothing."""
        call = self.call(site)
        if call is None:
            return None
        values = [k.value for k in call.keywords if k.arg == "value"] or call.args[1:2]
        line, pending = site.line, list(values)
        while pending:
            node = pending.pop(0)
            for division in ast.walk(node):
                if isinstance(division, ast.BinOp) and isinstance(division.op, ast.Div):
                    right = division.right
                    while isinstance(right, ast.Subscript):  # den[:, None]: den
                        right = right.value
                    name = right.id if isinstance(right, ast.Name) else None
                    built = self.definitions(name, division.lineno) if name else []
                    return self.site(built[-1] if built else self.statement(division.lineno))
            for name in _names(node):
                for statement in self.definitions(name, line):
                    pending.append(getattr(statement, "value", None) or statement)
        return None

    def resets(self):
        """The Sites of assignments inside a loop that throw away what a name carries from step
        to step: `state = tl.zeros(…)`, or `z = tl.sum(k, 0)` for a z set before the loop
        (not `z += …`, not `p = tl.advance(p, …)`); the ones to zero first."""
        found = []
        for statement in self.statements:
            loop = self._loop(statement)
            if not isinstance(statement, ast.Assign) or loop is None or self.updates(statement):
                continue
            zeros = isinstance(statement.value, ast.Call) and _name(statement.value.func) in _ZEROS
            carried = any(
                s.lineno < loop.lineno and _targets(s) & _targets(statement)
                for s in self.statements
            )
            if zeros or carried:
                found.append((not zeros, statement.lineno, self.site(statement)))
        return [site for *_, site in sorted(found)]

    def loops(self):
        """The Sites of the loops' first lines (`for t in range(N // C)`), in order."""
        lines = self.text.splitlines()
        return [
            Site(self.path, loop.lineno, " ".join(lines[loop.lineno - 1].split()).rstrip(":"))
            for loop in sorted(self._loops, key=lambda loop: loop.lineno)
        ]

    def target(self, site):
        """The names the statement on `site` assigns."""
        statement = self.statement(site.line)
        return _targets(statement) if statement else set()

    # --- what a statement mentions ---------------------------------------------------------
    def program_ids(self, axis):
        """The names assigned `tl.program_id(axis)` (alone or in a tuple)."""
        names = set()
        for statement in self.statements:
            if not isinstance(statement, ast.Assign):
                continue
            for target in statement.targets:
                pairs = [(target, statement.value)]
                if isinstance(target, ast.Tuple) and isinstance(statement.value, ast.Tuple):
                    pairs = list(zip(target.elts, statement.value.elts, strict=False))
                names |= {
                    t.id for t, v in pairs if isinstance(t, ast.Name) and _is_program_id(v, axis)
                }
        return names

    def loop_names(self):
        """The names that loops count with (`for t in range(…)`, `t += 1` in a while loop)."""
        counted = {
            n.id
            for loop in self._loops
            if isinstance(loop, ast.For)
            for n in ast.walk(loop.target)
            if isinstance(n, ast.Name)
        }
        return counted | {
            s.target.id for s in self.statements if self.counts(s) and self.in_loop(s)
        }

    @staticmethod
    def counts(statement):
        """Whether a statement steps a counter by a constant (`t += 1`)."""
        return (
            isinstance(statement, ast.AugAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(statement.value, ast.Constant)
        )

    def in_loop(self, statement):
        return self._loop(statement) is not None

    def _loop(self, statement):
        """The innermost loop a statement is in, or None."""
        loops = [n for n in self._loops if n.lineno < statement.lineno <= n.end_lineno]
        return max(loops, key=lambda loop: loop.lineno, default=None)

    @staticmethod
    def mentions(statement, names=(), axis=None):
        """Whether a statement uses one of `names`, or calls tl.program_id(axis)."""
        nodes = list(ast.walk(statement))
        return any(isinstance(n, ast.Name) and n.id in names for n in nodes) or (
            axis is not None and any(_is_program_id(n, axis) for n in nodes)
        )

    @staticmethod
    def builds_rows(statement):
        """Whether a statement spreads a tile over rows (`x[:, None]`) or gives strides (a block
        pointer or tensor descriptor)."""
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and _name(node.func) in (
                "make_block_ptr",
                "make_tensor_descriptor",
            ):
                return True
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
                if any(isinstance(e, ast.Constant) and e.value is None for e in node.slice.elts):
                    return True
        return False

    @staticmethod
    def updates(statement):
        """Whether a statement moves a name by itself (`p += …`, `p = tl.advance(p, …)`)."""
        return any(_builds_on(statement, name) for name in _targets(statement))

    def _simple(self, body):
        found = []
        for statement in body:
            if isinstance(statement, (ast.For, ast.While, ast.If, ast.With)):
                found += self._simple(statement.body) + self._simple(statement.orelse or [])
            elif not isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
                found.append(statement)
        return found


def _name(node):
    """The last name of a callee or attribute: "load" for tl.load and desc.load."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _names(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - {"tl", "triton"}


def _targets(statement):
    targets = getattr(statement, "targets", None) or [getattr(statement, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def _builds_on(statement, name):
    """Whether a statement assigning `name` uses its earlier value."""
    if isinstance(statement, ast.AugAssign):
        return True
    value = getattr(statement, "value", None)
    return value is not None and name in _names(value)


def _is_program_id(node, axis):
    if not (isinstance(node, ast.Call) and _name(node.func) == "program_id"):
        return False
    given = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "axis")]
    return bool(given) and isinstance(given[0], ast.Constant) and given[0].value == axis
