"""A small, safe expression language for kernel-package manifests (restrictions, launch geometry, sizes).

Manifests are untrusted text pushed over HTTP, so Python's ``eval`` is out of the question. Expressions
are parsed with ``ast`` and only a whitelist of node types is accepted: integer / float / string literals,
names bound by the caller, arithmetic, comparisons (chained), boolean logic, the ternary, tuples for
``in``, and calls of the functions in ``FUNCTIONS``. Anything else is rejected at parse time with the
offending construct named, so a bad manifest fails at upload, not in a worker.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

Value = int | float | bool | str | tuple[Any, ...]

MAX_SOURCE_CHARS = 500
MAX_NODES = 200
MAX_POWER_EXPONENT = 64


class ExpressionError(ValueError):
    """An expression that does not parse, uses a forbidden construct, or fails to evaluate."""


def _ceil_div(a: int, b: int) -> int:
    if b == 0:
        raise ExpressionError("ceil_div by zero")
    return -(-int(a) // int(b))


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * int(b)


def _log2(a: int) -> int:
    if a <= 0:
        raise ExpressionError(f"log2 of non-positive {a}")
    return int(math.log2(a))


def _is_pow2(a: int) -> bool:
    return int(a) > 0 and (int(a) & (int(a) - 1)) == 0


FUNCTIONS: dict[str, Callable[..., Value]] = {
    "ceil_div": _ceil_div,
    "round_up": _round_up,
    "min": min,
    "max": max,
    "abs": abs,
    "log2": _log2,
    "is_pow2": _is_pow2,
    "int": int,
}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


@dataclass(frozen=True)
class Expression:
    """A parsed, whitelisted expression; ``names`` are the free variables it reads."""

    source: str
    tree: ast.Expression
    names: frozenset[str]

    def evaluate(self, bindings: Mapping[str, Value]) -> Value:
        missing = self.names - bindings.keys()
        if missing:
            raise ExpressionError(f"{self.source!r}: unknown name(s) {', '.join(sorted(missing))}")
        try:
            return _eval(self.tree.body, bindings)
        except ExpressionError:
            raise
        except (ArithmeticError, TypeError, ValueError) as error:
            raise ExpressionError(f"{self.source!r}: {type(error).__name__}: {error}") from None

    def evaluate_int(self, bindings: Mapping[str, Value]) -> int:
        value = self.evaluate(bindings)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise ExpressionError(f"{self.source!r} must give an integer, gave {value!r}")
        return int(value)


@lru_cache(maxsize=4096)
def parse(source: str) -> Expression:
    """Parse and whitelist-check ``source``; ExpressionError names the forbidden construct."""
    if not isinstance(source, str) or not source.strip():
        raise ExpressionError("empty expression")
    if len(source) > MAX_SOURCE_CHARS:
        raise ExpressionError(f"expression longer than {MAX_SOURCE_CHARS} characters")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"{source!r} does not parse: {error.msg}") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ExpressionError(f"{source!r} is too complex ({len(nodes)} nodes, limit {MAX_NODES})")
    names: set[str] = set()
    for node in nodes:
        _check_node(node, source)
        if isinstance(node, ast.Name) and node.id not in FUNCTIONS:
            names.add(node.id)
    return Expression(source, tree, frozenset(names))


_ALLOWED_NODES: tuple[type[ast.AST], ...] = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Tuple,
    ast.List,
    ast.And,
    ast.Or,
    *_BINARY,
    *_UNARY,
    *_COMPARE,
)


def _check_node(node: ast.AST, source: str) -> None:
    if not isinstance(node, _ALLOWED_NODES):
        raise ExpressionError(f"{source!r}: {type(node).__name__} is not allowed")
    if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | str):
        raise ExpressionError(f"{source!r}: constant {node.value!r} is not allowed")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise ExpressionError(
                f"{source!r}: only these functions may be called: {', '.join(sorted(FUNCTIONS))}"
            )
        if node.keywords:
            raise ExpressionError(f"{source!r}: keyword arguments are not allowed")
    if isinstance(node, ast.Name) and node.id.startswith("_"):
        raise ExpressionError(f"{source!r}: name {node.id!r} is not allowed")


def _eval(node: ast.expr, env: Mapping[str, Value]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_eval(item, env) for item in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, env))
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_POWER_EXPONENT:
            raise ExpressionError(f"exponent {right} too large")
        if isinstance(node.op, ast.LShift) and right > MAX_POWER_EXPONENT:
            raise ExpressionError(f"shift {right} too large")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(value, env) for value in node.values)
        return any(_eval(value, env) for value in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, env)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env) if _eval(node.test, env) else _eval(node.orelse, env)
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return FUNCTIONS[node.func.id](*(_eval(arg, env) for arg in node.args))
    raise ExpressionError(f"{type(node).__name__} is not allowed")  # unreachable after _check_node


def evaluate(source: str, bindings: Mapping[str, Value]) -> Value:
    return parse(source).evaluate(bindings)


def evaluate_int(source: str, bindings: Mapping[str, Value]) -> int:
    return parse(source).evaluate_int(bindings)


def as_int(value: Value) -> int:
    """An evaluated value that must be a whole number (e.g. a derived launch quantity)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ExpressionError(f"{value!r} is not an integer")
    return int(value)
