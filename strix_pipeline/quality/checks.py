"""Whether an engine's completion answers an evaluation item: by the item's kind, never by a model.

An engine is not trusted (a registry image is whatever its publisher built), so its code answers are
never run as Python: a completion must parse into a one-expression function over its parameters, made
only of arithmetic, comparisons, conditionals and three pure builtins, with small numbers; nothing
that could loop, call out, import, reach an attribute or build a huge value is accepted.
"""

from __future__ import annotations

import ast
import json
import math
import re

from strix_pipeline.quality.items import EvalItem

_NUMBER = re.compile(r"-?\d+")
_WORD = re.compile(r"[A-Za-z]+")

_SAFE_CALLS = {"max": max, "min": min, "abs": abs}
_SAFE_NODES = (
    ast.Module,
    ast.FunctionDef,
    ast.arguments,
    ast.arg,
    ast.Return,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Name,
    ast.Constant,
    ast.Load,
    ast.Call,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.USub,
    ast.UAdd,
    ast.Not,
    ast.And,
    ast.Or,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
)
_MAX_CONSTANT = 10**6
_MAX_EXPONENT = 8


def first_line(completion: str) -> str:
    return completion.split("\n", 1)[0]


def passes(item: EvalItem, completion: str) -> bool:
    """Whether ``completion`` (what the engine wrote after the prompt) answers ``item``."""
    line = first_line(completion)
    if item.kind == "number":
        found = _NUMBER.search(line)
        return found is not None and int(found.group()) == int(item.expected)
    if item.kind == "word":
        found = _WORD.search(line)
        return found is not None and found.group().lower() == item.expected.lower()
    if item.kind == "json":
        last = item.prompt.rsplit("\n", 1)[-1]
        try:
            return json.loads(last + line) == json.loads(item.expected)
        except ValueError:
            return False
    return _code_passes(item, line)


def _code_passes(item: EvalItem, line: str) -> bool:
    function = safe_function(item.prompt + line)
    if function is None:
        return False
    for args, result in json.loads(item.expected):
        try:
            if function(*args) != result:
                return False
        except (ArithmeticError, TypeError, ValueError):
            return False
    return True


def safe_function(source: str):
    """The one function ``source`` defines, if it is made only of what the module docstring allows;
    else None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    fn = tree.body[0]
    params = {a.arg for a in fn.args.args}
    if fn.decorator_list or fn.returns or len(fn.body) != 1 or not isinstance(fn.body[0], ast.Return):
        return None
    if fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs or fn.args.defaults or fn.args.posonlyargs:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, _SAFE_NODES) or not _node_allowed(node, params):
            return None
    namespace: dict = {"__builtins__": dict(_SAFE_CALLS)}
    exec(compile(tree, "<answer>", "exec"), namespace)  # noqa: S102 - only the node types above remain
    return namespace[fn.name]


def _node_allowed(node: ast.AST, params: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in params or node.id in _SAFE_CALLS
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or value is None:
            return True
        # numbers only: with no string, no product can build a huge value from a short answer
        return isinstance(value, int | float) and math.isfinite(value) and abs(value) <= _MAX_CONSTANT
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Name)
            and node.func.id in _SAFE_CALLS
            and not node.keywords
            and 0 < len(node.args) <= 4
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        # x ** 9 ** 9 would compute for hours: a power's exponent is a small constant
        exp = node.right
        return isinstance(exp, ast.Constant) and type(exp.value) is int and 0 <= exp.value <= _MAX_EXPONENT
    return True
