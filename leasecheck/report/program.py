"""Reading a printed Hypothesis program (``state.op(k=v, ...)`` lines) as data, with ``ast``.

A shrunk stateful counterexample is Python source, but a report must never run
text it was handed: each line is parsed with ``ast`` and its values are rebuilt by
a small evaluator that knows constants, containers, names bound by earlier lines
(``tickets_0``) and calls of the few value classes the machine's module defines
(``When``, ``Shift``, ``RetryPolicy``, ...). Anything else is a ``ProgramError``.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Call", "ProgramError", "Variable", "parse_line", "value_of"]


class ProgramError(ValueError):
    """A program line that is not ``[targets =] state.method(keyword=value, ...)``."""


@dataclass(frozen=True)
class Variable:
    """A name bound by an earlier line (``tickets_0``), resolved when the step runs."""

    name: str


@dataclass(frozen=True)
class Call:
    """One program line: ``targets = state.method(**arguments)``."""

    line: str
    method: str
    arguments: Mapping[str, object] = field(default_factory=dict)
    targets: tuple[str, ...] = ()
    unpack: bool = False
    """True for ``(t0,) = ...``: the result is a ``multiple(...)`` to unpack."""


def parse_line(line: str, constructors: Mapping[str, type]) -> Call:
    """Parse one program line; ``constructors`` are the value classes it may call."""
    try:
        tree = ast.parse(line.strip(), mode="exec")
    except SyntaxError as error:
        raise ProgramError(f"program line {line.strip()!r} is not Python: {error.msg}") from None
    if len(tree.body) != 1:
        raise ProgramError(f"program line {line.strip()!r} is not one statement")
    statement = tree.body[0]
    targets, unpack = _targets(statement, line)
    value = statement.value if isinstance(statement, ast.Assign | ast.Expr) else None
    if not (isinstance(value, ast.Call) and _is_state_method(value.func)) or value.args:
        raise ProgramError(f"program line {line.strip()!r} is not state.<method>(name=value, ...)")
    assert isinstance(value.func, ast.Attribute)
    arguments = {kw.arg: _value(kw.value, constructors, line) for kw in value.keywords if kw.arg}
    return Call(line.strip(), value.func.attr, arguments, targets, unpack)


def _is_state_method(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "state"
    )


def _targets(statement: ast.stmt, line: str) -> tuple[tuple[str, ...], bool]:
    if isinstance(statement, ast.Expr):
        return (), False
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        raise ProgramError(f"program line {line.strip()!r} is neither a call nor one assignment")
    target = statement.targets[0]
    if isinstance(target, ast.Name):
        return (target.id,), False
    if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
        return tuple(e.id for e in target.elts if isinstance(e, ast.Name)), True
    raise ProgramError(f"program line {line.strip()!r} assigns to something other than names")


_NAMED = {"None": None, "True": True, "False": False}


def _value(node: ast.expr, constructors: Mapping[str, type], line: str) -> object:
    """Rebuild a literal, a container, a variable or a whitelisted constructor call."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand, constructors, line)
        if isinstance(operand, int | float) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name):
        return _NAMED[node.id] if node.id in _NAMED else Variable(node.id)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = [_value(e, constructors, line) for e in node.elts]
        kind = {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)]
        return kind(items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {
            _value(k, constructors, line): _value(v, constructors, line)  # type: ignore[arg-type]
            for k, v in zip(node.keys, node.values, strict=True)
        }
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _construct(node, constructors, line)
    raise ProgramError(f"program line {line.strip()!r}: cannot read {ast.unparse(node)!r}")


def _construct(node: ast.Call, constructors: Mapping[str, type], line: str) -> object:
    assert isinstance(node.func, ast.Name)
    cls = constructors.get(node.func.id)
    if cls is None:
        known = ", ".join(sorted(constructors))
        raise ProgramError(
            f"program line {line.strip()!r} calls {node.func.id}(); only {known} are read"
        )
    args = [_value(a, constructors, line) for a in node.args]
    kwargs = {k.arg: _value(k.value, constructors, line) for k in node.keywords if k.arg}
    return cls(*args, **kwargs)


def value_of(value: object, variables: Mapping[str, Any]) -> Any:
    """``value`` with every ``Variable`` replaced by what an earlier line bound to it."""
    if isinstance(value, Variable):
        if value.name not in variables:
            raise ProgramError(f"the program uses {value.name} before any line binds it")
        return variables[value.name]
    return value
