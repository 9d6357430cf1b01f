"""JSON for the values an operation carries: exact, so a record reads back as it was.

The suite sends bad arguments on purpose (``True`` where an int is wanted, a tuple
where a dict is, ``nan``), and the contracts compare exact types, so the JSON form
keeps them apart: plain JSON for ``None``, ``bool``, ``int``, ``str``, finite floats,
lists and ``dict`` with string keys; a one-key object ``{"$tag": ...}`` for the rest
(tuples, other dicts, odd floats, the JobQueue's frozen types). A value that has no
JSON form (a dict subclass, a lambda) is written as its repr and reads back as
``Shown``: it still prints the same, which is all a report needs of it.

Each contract's table of operation kinds (``Kinds``) also lives here: the one place
that names an operation's parameters, so adding an argument is one edit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from leasecheck.queue_impl.jobs import JobStatus, JobView, Lease

__all__ = ["Held", "Kind", "Shown", "bind", "from_json_value", "register", "to_json_value"]

JSONValue = Any
"""What ``json.dumps`` accepts."""


@dataclass(frozen=True, slots=True)
class Shown:
    """A value that had no JSON form, kept as its repr (``repr`` gives the text back)."""

    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Held:
    """An argument meaning: the ticket (lease) this process holds, counted back from the
    latest one it got (the harness puts the real one in when the call runs)."""

    back: int = 0

    def __repr__(self) -> str:
        return "<latest ticket>" if self.back == 0 else f"<ticket {self.back} before the latest>"


@dataclass(frozen=True, slots=True)
class Kind:
    """One operation kind of a contract: its name and its parameters, in call order.

    ``defaults`` are the values the contract gives omitted trailing parameters (a record
    keeps only what was given, so its JSON and its line say what the caller wrote);
    ``hooked``: the call takes a ``fault`` hook; ``writes``: it may change stored state.
    """

    name: str
    params: tuple[str, ...] = ()
    defaults: Mapping[str, object] = field(default_factory=dict)
    hooked: bool = False
    writes: bool = True

    def required(self) -> tuple[str, ...]:
        return tuple(p for p in self.params if p not in self.defaults)


def bind(
    kind: Kind, args: tuple[object, ...], kwargs: Mapping[str, object]
) -> tuple[tuple[str, object], ...]:
    """``kind(*args, **kwargs)`` as (parameter, value) pairs in parameter order; a missing
    required parameter, an unknown one or one given twice is a ``TypeError``."""
    if len(args) > len(kind.params):
        raise TypeError(f"{kind.name} takes {len(kind.params)} arguments but got {len(args)}")
    given = dict(zip(kind.params, args, strict=False))
    for name, value in kwargs.items():
        if name not in kind.params:
            raise TypeError(f"{kind.name} has no parameter {name!r} (it has {kind.params})")
        if name in given:
            raise TypeError(f"{kind.name} got {name!r} twice")
        given[name] = value
    missing = (
        [name for name in kind.required() if name not in given]
        if len(given) < len(kind.params)  # every parameter given: none can be missing
        else ()
    )
    if missing:
        raise TypeError(f"{kind.name} needs {', '.join(missing)}")
    return tuple((name, given[name]) for name in kind.params if name in given)


_Codec = tuple[type, Callable[[Any], JSONValue], Callable[[JSONValue], Any]]
_CODECS: dict[str, _Codec] = {}


def register(
    tag: str, cls: type, encode: Callable[[Any], JSONValue], decode: Callable[[JSONValue], Any]
) -> None:
    """Give values of exactly ``cls`` the JSON form ``{"$<tag>": encode(value)}``."""
    _CODECS[tag] = (cls, encode, decode)


def _plain_dict(value: dict[Any, Any]) -> bool:
    return type(value) is dict and all(type(k) is str and not k.startswith("$") for k in value)


def to_json_value(value: object) -> JSONValue:
    """``value`` as JSON that ``from_json_value`` turns back into an equal value of the
    same types (or a ``Shown`` where no JSON form exists)."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if type(value) is list:
        return [to_json_value(item) for item in value]
    if type(value) is tuple:
        return {"$tuple": [to_json_value(item) for item in value]}
    if isinstance(value, dict) and _plain_dict(value):
        return {key: to_json_value(item) for key, item in value.items()}
    if type(value) is dict:
        return {"$dict": [[to_json_value(k), to_json_value(v)] for k, v in value.items()]}
    for tag, (cls, encode, _) in _CODECS.items():
        if type(value) is cls:
            return {f"${tag}": encode(value)}
    return {"$repr": repr(value)}


def from_json_value(data: JSONValue) -> Any:
    """The value ``to_json_value`` wrote."""
    if isinstance(data, list):
        return [from_json_value(item) for item in data]
    if not isinstance(data, dict):
        return data
    if len(data) == 1:
        [(key, inner)] = data.items()
        if key.startswith("$"):
            return _tagged(key[1:], inner)
    return {key: from_json_value(item) for key, item in data.items()}


def _tagged(tag: str, inner: JSONValue) -> Any:
    if tag == "float":
        return float(inner)
    if tag == "tuple":
        return tuple(from_json_value(item) for item in inner)
    if tag == "dict":
        return {from_json_value(k): from_json_value(v) for k, v in inner}
    if tag == "repr":
        return Shown(inner)
    if tag in _CODECS:
        return _CODECS[tag][2](inner)
    raise ValueError(f"unknown JSON value tag ${tag} (known: {sorted(_CODECS)})")


def _fields(value: object) -> dict[str, JSONValue]:
    return {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}  # type: ignore[arg-type]


def _decode_fields(cls: type) -> Callable[[JSONValue], Any]:
    return lambda inner: cls(**{k: from_json_value(v) for k, v in inner.items()})


register("Held", Held, lambda held: held.back, lambda back: Held(back))
register("JobStatus", JobStatus, lambda status: status.name, lambda name: JobStatus[name])
register("Lease", Lease, _fields, _decode_fields(Lease))
register("JobView", JobView, _fields, _decode_fields(JobView))


@dataclass(frozen=True, slots=True)
class Answer:
    """What one call did: returned ``result``, or raised the error named ``error`` (with
    ``detail``). The base of a contract's outcome record; ``CONTRACT`` names it in JSON."""

    CONTRACT: ClassVar[str] = ""

    result: object = None
    error: str | None = None
    detail: str = ""

    def describe(self) -> str:
        if self.error is None:
            return f"returned {self.result!r}"
        return f"raised {self.error}"

    def to_json(self) -> dict[str, Any]:
        if self.error is None:
            return {"contract": self.CONTRACT, "result": to_json_value(self.result)}
        return {"contract": self.CONTRACT, "error": self.error, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(from_json_value(data.get("result")), data.get("error"), data.get("detail", ""))
