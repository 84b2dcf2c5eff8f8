"""How templates compile: Jinja's code generator with the sandbox's hooks where values can grow or be walked.

- `a ~ b` calls the environment's bounded join instead of jinja2.runtime.str_join;
- comparisons call its priced compare, unless one side is a literal (nothing deep is walked then);
- computed dict keys and subscripts go through its hashed_key (a shared tuple hashes for ages in C);
- `+` and `-` with a short literal operand compile as plain Python: nothing can multiply there, and they
  are most of the arithmetic real templates do. Every other arithmetic operator is intercepted.
"""

from __future__ import annotations

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, operators, optimizeconst


class BoundedCodeGenerator(CodeGenerator):
    """The hooks above; a chain of comparisons evaluates all its operands."""

    def visit_Concat(self, node, frame):
        self.write("environment.bounded_str_join((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")

    def visit_Dict(self, node, frame):
        """A computed key is hashed in C (a tuple nested by doubling hashes for ages): priced first."""
        self.write("{")
        for index, item in enumerate(node.items):
            if index:
                self.write(", ")
            if isinstance(item.key, nodes.Const):
                self.visit(item.key, frame)
            else:
                self.write("environment.hashed_key(")
                self.visit(item.key, frame)
                self.write(")")
            self.write(": ")
            self.visit(item.value, frame)
        self.write("}")

    @optimizeconst
    def visit_Getitem(self, node, frame):
        """`x[key]` with a computed key hashes it in C: the key goes through hashed_key (constant keys and
        slices, the common cases, compile as Jinja compiles them)."""
        if isinstance(node.arg, (nodes.Const, nodes.Slice)):
            return super().visit_Getitem(node, frame)
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
