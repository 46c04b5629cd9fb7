"""A safe arithmetic tool for role workers: the `calculator` tool.

Owns evaluating an arithmetic expression by walking its `ast`: numbers,
``+ - * / // % **``, unary signs, parentheses, and a fixed set of `math`
functions and constants. Anything else (names, attributes, strings,
comprehensions, keyword arguments ...) is refused with a `ToolError` naming
the part. Bounds on the expression's length and on the size of integer
results keep ``9**9**9`` from hanging. Imports `planexec.workers.tools`,
`planexec.errors` and the stdlib only.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from planexec.errors import ToolError
from planexec.workers.tools import tool

__all__ = ["MAX_DEPTH", "MAX_EXPRESSION_CHARS", "MAX_INT_BITS", "calculator"]

MAX_EXPRESSION_CHARS = 1_000
MAX_INT_BITS = 10_000  # about 3,000 decimal digits: well inside what JSON and int->str allow
MAX_DEPTH = 500  # nested operators and calls; a 1,000-character sum of single digits is 499 deep

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs, "round": round, "min": min, "max": max,
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log10": math.log10, "log2": math.log2,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos, "atan": math.atan,
    "atan2": math.atan2, "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh, "hypot": math.hypot,
    "floor": math.floor, "ceil": math.ceil, "degrees": math.degrees, "radians": math.radians,
}  # fmt: skip
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _refuse(message: str) -> ToolError:
    return ToolError(f"calculator: {message}", tool="calculator")


def _check_size(value: Any) -> Any:
    if isinstance(value, complex):  # (-8) ** (1/3) and the like
        raise _refuse(f"the result would be a complex number ({value})")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _refuse(f"an intermediate result has more than {MAX_INT_BITS} bits")
    return value


def _power(base: Any, exponent: Any) -> Any:
    # estimated before computing, since computing 9**387420489 is what hangs
    both_int = isinstance(base, int) and isinstance(exponent, int)
    if both_int and abs(base) > 1 and exponent * (abs(base).bit_length() - 1) > MAX_INT_BITS:
        raise _refuse(f"{base}**{exponent} is too large (results are bounded to {MAX_INT_BITS} bits)")
    return base**exponent


def _evaluate(node: ast.AST, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise _refuse(f"the expression is nested more than {MAX_DEPTH} levels deep")
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, depth)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, depth + 1), _evaluate(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, depth + 1))
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        if node.keywords:
            raise _refuse(f"keyword arguments are not supported: {ast.unparse(node)!r}")
        return _check_size(_FUNCTIONS[node.func.id](*(_evaluate(arg, depth + 1) for arg in node.args)))
    raise _refuse(f"unsupported {_describe(node)}: {ast.unparse(node)!r}")


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return "name"
    if isinstance(node, ast.Call):
        return "function"
    if isinstance(node, ast.Constant):
        return f"{type(node.value).__name__} constant"
    if isinstance(node, ast.BinOp | ast.UnaryOp):
        return "operator"
    return f"syntax ({type(node).__name__})"


@tool(name="calculator", idempotent=True, read_only=True, untrusted_output=False)
def calculator(expression: str) -> float | int:
    """Evaluate an arithmetic expression exactly as Python would and return the number.

    Supports numbers, + - * / // % ** and parentheses; the functions abs,
    round, min, max, sqrt, exp, log (natural, or log(x, base)), log10, log2,
    sin, cos, tan, asin, acos, atan, atan2, sinh, cosh, tanh, hypot, floor,
    ceil, degrees, radians; and the constants pi, e, tau. Angles are in
    radians. Example: ``sqrt(2) * (3 + 4) ** 2``.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise _refuse(f"the expression is {len(expression)} characters; the limit is {MAX_EXPRESSION_CHARS}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, MemoryError, RecursionError) as exc:  # the parser's own nesting limits
        raise _refuse(f"not a valid expression: {getattr(exc, 'msg', exc)} in {expression!r}") from None
    try:
        value = _evaluate(tree)
    except ToolError:
        raise
    except (ArithmeticError, ValueError, TypeError) as exc:  # 1/0, sqrt(-1), min() ...
        raise _refuse(f"{expression!r} cannot be computed: {exc}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise _refuse(f"{expression!r} is not a finite number ({value})")
    number: float | int = value
    return number
