"""How templates compile: Jinja's code generator with the sandbox's hooks where values can grow or be walked.

- `a ~ b` calls the environment's bounded join instead of jinja2.runtime.str_join;
- comparisons call its priced compare, unless one side is a literal (nothing deep is walked then);
- computed dict keys and subscripts go through its hashed_key (a shared tuple hashes for ages in C);
- `+` and `-` with a short literal operand compile as plain Python: nothing can multiply there, and they
  are most of the arithmetic real templates do. Every other arithmetic operator is intercepted;
- a dict literal of many items is built one item at a time (keys that all hash alike make each insertion
  a C scan, which the budget can stop between two, and not inside one C call building the whole);
- string literals are the template's own text (owned.Owned, bound once per compiled template), except
  where one is only looked up or compared (subscripts, dict keys, comparisons, tests, the arguments of
  filters and methods that look things up): there a plain str is cheaper and can't reach the output.
"""

from __future__ import annotations

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, operators, optimizeconst


_LOOKUP_FILTERS = frozenset({"selectattr", "rejectattr", "select", "reject", "map", "groupby", "sort", "unique",
                             "min", "max", "sum", "dictsort", "attr", "items"})
_LOOKUP_METHODS = frozenset({"split", "rsplit", "startswith", "endswith", "find", "rfind", "count", "index",
                             "rindex", "get", "strip", "lstrip", "rstrip", "removeprefix", "removesuffix"})
_SMALL_DICT = 64


class BoundedCodeGenerator(CodeGenerator):
    """The hooks above; a chain of comparisons evaluates all its operands."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._owned: dict[str, str] = {}     # literal -> the module-level name of its owned string
        self._plain = 0                      # > 0 while visiting where literals are only looked up

    # -- the template's own text
    def _owned_name(self, text: str) -> str:
        name = self._owned.get(text)
        if name is None:
            name = self._owned[text] = f"owned_{len(self._owned)}"
        return name

    def visit_Template(self, node, frame=None):
        super().visit_Template(node, frame)
        if self._owned:
            self.writeline("from tokworker.templates.owned import owned as owned_")
            for text, name in self._owned.items():
                self.writeline(f"{name} = owned_({text!r})")

    def visit_Const(self, node, frame):
        value = node.as_const(frame.eval_ctx)
        if type(value) is str and value and not self._plain:
            self.write(self._owned_name(value))
        else:
            super().visit_Const(node, frame)

    def visit_TemplateData(self, node, frame):
        value = node.as_const(frame.eval_ctx)
        self.write(self._owned_name(value) if value else repr(value))

    def _output_const_repr(self, group) -> str:
        text = "".join(map(str, group))
        return self._owned_name(text) if text else repr(text)

    def _output_child_pre(self, node, frame, finalize):
        self.write("environment.finalize(")     # it shows every value as text: no str() around it

    def _output_child_post(self, node, frame, finalize):
        self.write(")")

    def _looked_up(self, visit, node, frame):
        self._plain += 1
        try:
            return visit(node, frame)
        finally:
            self._plain -= 1

    def visit_Test(self, node, frame):
        return self._looked_up(super().visit_Test, node, frame)

    def visit_Filter(self, node, frame):
        if node.name in _LOOKUP_FILTERS:
            return self._looked_up(super().visit_Filter, node, frame)
        return super().visit_Filter(node, frame)

    def visit_Call(self, node, frame, **kwargs):
        if isinstance(node.node, nodes.Getattr) and node.node.attr in _LOOKUP_METHODS:
            self._plain += 1
            try:
                return super().visit_Call(node, frame, **kwargs)
            finally:
                self._plain -= 1
        return super().visit_Call(node, frame, **kwargs)

    def visit_Concat(self, node, frame):
        self.write("environment.bounded_str_join((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")

    def visit_Dict(self, node, frame):
        """A computed key is hashed in C (a tuple nested by doubling hashes for ages): priced first. Many
        items are built one at a time (see the module's docstring)."""
        small = len(node.items) <= _SMALL_DICT
        self.write("{" if small else "environment.bounded_dict((")
        for index, item in enumerate(node.items):
            if index:
                self.write(", ")
            if not small:
                self.write("(")
            if isinstance(item.key, nodes.Const):
                self._looked_up(self.visit, item.key, frame)
            else:
                self.write("environment.hashed_key(")
                self.visit(item.key, frame)
                self.write(")")
            self.write(": " if small else ", ")
            self.visit(item.value, frame)
            if not small:
                self.write(")")
        self.write("}" if small else ",))")

    @optimizeconst
    def visit_Getitem(self, node, frame):
        """`x[key]` with a computed key hashes it in C: the key goes through hashed_key (constant keys and
        slices, the common cases, compile as Jinja compiles them)."""
        if isinstance(node.arg, (nodes.Const, nodes.Slice)):
            return self._looked_up(super().visit_Getitem, node, frame)
        self.write("environment.getitem(")
        self.visit(node.node, frame)
        self.write(", environment.hashed_key(")
        self.visit(node.arg, frame)
        self.write("))")

    def _binop_with_small_constant(self, node, frame, operator: str) -> bool:
        """`x + 'text'` or `n - 1`: with one operand a short literal, nothing can multiply, so the operator
        compiles as plain Python (the common case in real templates); True when it did."""
        if not (_is_small_constant(node.left) or _is_small_constant(node.right)):
            return False
        self.write("(")
        self.visit(node.left, frame)
        self.write(f" {operator} ")
        self.visit(node.right, frame)
        self.write(")")
        return True

    @optimizeconst
    def visit_Add(self, node, frame):
        if not self._binop_with_small_constant(node, frame, "+"):
            super().visit_Add(node, frame)

    @optimizeconst
    def visit_Sub(self, node, frame):
        if not self._binop_with_small_constant(node, frame, "-"):
            super().visit_Sub(node, frame)

    @optimizeconst
    def visit_Compare(self, node, frame):
        self._plain += 1
        try:
            self._compare(node, frame)
        finally:
            self._plain -= 1

    def _compare(self, node, frame):
        if len(node.ops) == 1 and _compares_with_constant(node.expr, node.ops[0]):
            return super().visit_Compare(node, frame)    # against a literal nothing deep is walked
        self.write("environment.compare(" if len(node.ops) == 1 else "environment.compare_chain(")
        self.visit(node.expr, frame)
        for operand in node.ops:
            self.write(f", {operators[operand.op]!r}, ")
            self.visit(operand.expr, frame)
        self.write(")")


def _is_small_constant(node) -> bool:
    if not isinstance(node, nodes.Const):
        return False
    value = node.value
    if isinstance(value, str):
        return len(value) <= 4096
    return type(value) in (int, float) and (type(value) is float or value.bit_length() <= 64)


def _compares_with_constant(left, operand) -> bool:
    """True when `left <op> operand` can't walk a container: one side is a literal scalar, or `in` a
    literal string or a literal list of scalars."""
    right = operand.expr
    if operand.op in ("in", "notin"):
        if isinstance(right, nodes.Const):
            return isinstance(right.value, str)
        return isinstance(right, (nodes.List, nodes.Tuple)) and all(
            isinstance(item, nodes.Const) and isinstance(item.value, (str, int, float, bool, type(None)))
            for item in right.items)
    return any(isinstance(side, nodes.Const) and isinstance(side.value, (str, int, float, bool, type(None)))
               for side in (left, right))
