"""Which lines touch nothing another thread can see (so switching before them is useless).

A line whose bytecode only moves the frame's own local variables around, and only
when those hold plain values (``str``, ``int``, ``bool``, ``None``, ``float``), or
calls a pure builtin (``type``, ``isinstance``, ``len``, ...) or a function of the
target's module on them, commutes with every step of every other thread: running
another thread just before it or just after it gives the same states. CHESS makes
the same reduction (it preempts only at visible operations). The scheduler skips
the point at such a line, which is sound for any target and removes most of the
argument checking at the top of every method from the schedules.

Everything else is visible: attribute and item access, iteration, a global that
is not a function, ``return`` and ``raise`` (the caller, maybe the harness,
continues), and any local that holds an object.
"""

from __future__ import annotations

import builtins
import dis
from types import CodeType, FrameType, FunctionType

from leasecheck.stateful_tests._coop_threading import CoopCondition, CoopLock, CoopSemaphore

__all__ = ["LocalLines"]

_VALUE_FREE = frozenset((
    "NOP", "RESUME", "CACHE", "EXTENDED_ARG", "LOAD_FAST", "STORE_FAST", "LOAD_CONST",
    "POP_TOP", "IS_OP", "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE", "JUMP_FORWARD",
    "JUMP_BACKWARD", "COPY", "SWAP", "PUSH_NULL", "KW_NAMES",
))  # fmt: skip
"""Opcodes that touch only the frame's own locals and stack, whatever the values."""
_ON_PLAIN_VALUES = frozenset((
    "COMPARE_OP", "BINARY_OP", "UNARY_NOT", "UNARY_NEGATIVE", "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
    "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP", "CONTAINS_OP", "FORMAT_VALUE",
    "BUILD_STRING", "BUILD_TUPLE", "LOAD_ATTR", "LOAD_METHOD", "PRECALL", "CALL", "LOAD_GLOBAL",
))  # fmt: skip
"""Opcodes that are local when every value involved is plain (no user code can run)."""
_JUMPS = frozenset(dis.hasjrel + dis.hasjabs)
_PLAIN = (str, int, bool, float, type(None))
_PURE_BUILTINS = frozenset(
    id(getattr(builtins, name))
    for name in ("type", "isinstance", "len", "str", "int", "bool", "float", "repr", "abs")
)


class _Chunk:
    """What the instructions run from one line event to the next do."""

    def __init__(self, instructions: list[dis.Instruction]) -> None:
        names = [i.opname for i in instructions]
        body = set(names) - {"RETURN_VALUE"}
        self.value_free = body <= _VALUE_FREE
        self.local = body <= _VALUE_FREE | _ON_PLAIN_VALUES
        self.returns = "RETURN_VALUE" in names
        self.reads = tuple({i.argval for i in instructions if i.opname == "LOAD_FAST"})
        self.globs = tuple({i.argval for i in instructions if i.opname == "LOAD_GLOBAL"})
        self.lock = None
        if names[:4] == ["LOAD_FAST", "LOAD_ATTR", "BEFORE_WITH", "POP_TOP"] and len(names) == 4:
            self.lock = (instructions[0].argval, instructions[1].argval)
        """``with x.attr:`` (x local): local when ``x.attr`` is a cooperative lock."""


def _chunks(code: CodeType) -> dict[int, _Chunk]:
    """Per offset where a line starts: the contiguous instructions of that line from it
    (the whole line when a jump inside it leaves that stretch)."""
    instructions = list(dis.get_instructions(code))
    lines: list[int] = []
    line = code.co_firstlineno
    for instruction in instructions:
        if instruction.positions is not None and instruction.positions.lineno is not None:
            line = instruction.positions.lineno
        lines.append(line)
    found: dict[int, _Chunk] = {}
    for start, instruction in enumerate(instructions):
        if start and lines[start] == lines[start - 1]:
            continue
        end = start
        while end < len(instructions) and lines[end] == lines[start]:
            end += 1
        stretch = instructions[start:end]
        inside = {i.offset for i in stretch}
        if any(i.opcode in _JUMPS and i.argval not in inside for i in stretch):
            stretch = [i for i, n in zip(instructions, lines, strict=True) if n == lines[start]]
        found[instruction.offset] = _Chunk(stretch)
    return found


class LocalLines:
    """Answers "is the step this frame is about to run local?" (cached per code object)."""

    _known: dict[str, LocalLines] = {}

    @classmethod
    def of(cls, module_file: str) -> LocalLines:
        """The analysis of ``module_file``, shared by every run (it is static)."""
        found = cls._known.get(module_file)
        if found is None:
            found = cls._known[module_file] = cls(module_file)
        return found

    def __init__(self, module_file: str) -> None:
        self.module_file = module_file
        self.codes: dict[CodeType, dict[int, _Chunk]] = {}
        self.continuations: dict[tuple[CodeType, int, int], bool] = {}
        """(caller code, offset, line) -> the rest of that line after the call is local."""

    def _chunk(self, frame: FrameType) -> _Chunk | None:
        code = frame.f_code
        chunks = self.codes.get(code)
        if chunks is None:
            chunks = self.codes[code] = _chunks(code)
        return chunks.get(frame.f_lasti)

    def local(self, frame: FrameType) -> bool:
        chunk = self._chunk(frame)
        if chunk is None:
            return False
        if chunk.lock is not None:
            holder = frame.f_locals.get(chunk.lock[0])
            primitive = getattr(holder, chunk.lock[1], None)
            return isinstance(primitive, (CoopLock, CoopCondition, CoopSemaphore))
        if not chunk.local or not self._plain(frame, chunk):
            return False
        return not chunk.returns or self._continues_locally(frame.f_back)

    def _plain(self, frame: FrameType, chunk: _Chunk) -> bool:
        if chunk.value_free and not chunk.returns:
            return True
        values = frame.f_locals
        if any(type(values.get(name)) not in _PLAIN for name in chunk.reads):
            return False
        return all(self._pure(frame, name) for name in chunk.globs)

    def _continues_locally(self, caller: FrameType | None) -> bool:
        """A plain value returns to ``caller``: is the rest of its current line local?"""
        if caller is None or caller.f_code.co_filename != self.module_file:
            return False  # the harness: the operation returns, which others can see
        where = (caller.f_code, caller.f_lasti, caller.f_lineno)
        found = self.continuations.get(where)
        if found is None:
            rest = {
                i.opname
                for i in dis.get_instructions(caller.f_code)
                if i.offset > caller.f_lasti and i.positions and i.positions.lineno == where[2]
            }
            found = self.continuations[where] = rest <= {"STORE_FAST", "POP_TOP", "NOP", "CACHE"}
        return found

    def _pure(self, frame: FrameType, name: str) -> bool:
        value = frame.f_globals.get(name, getattr(builtins, name, None))
        if id(value) in _PURE_BUILTINS:
            return True
        if isinstance(value, type) and issubclass(value, BaseException):
            return True
        return isinstance(value, FunctionType) and value.__code__.co_filename == self.module_file
