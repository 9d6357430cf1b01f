"""The one comparison core of the lease worker contract: what a call did, and how two sides differ.

Every harness that runs an operation on a target and on the model (the agreement
machine, the conformance replay of explored transitions, the crash harness and its
races) turns each side's call into a ``LeaseOutcome`` (``models.lease_ops``) and asks
``differences``. The comparison is *strict*: ``True`` and ``1`` differ, and so do
``{'a': 1}`` and a dict subclass with the same items, at every depth of dicts, lists and
tuples, because the spec fixes exact types ("returns ``True``", "exactly a dict").
Errors are compared by the contract's name for them (``error_kind``), since a target
defines its own ``Conflict``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from types import ModuleType

from leasecheck.models.contracts import Snapshot, same
from leasecheck.models.lease_ops import LeaseOutcome

__all__ = [
    "WORKER_ERRORS",
    "LeaseOutcome",
    "differences",
    "error_kind",
    "kind_from_classes",
    "same",
    "snapshot_differences",
]

WORKER_ERRORS = ("Conflict", "Retryable", "Permanent", "BadAck")
"""The exception classes every worker defines, by name."""
_BUILTIN_ERRORS = ("FileNotFoundError", "IllegalStateError", "KeyError", "ValueError")


def error_kind(error: BaseException, module: ModuleType | None = None) -> str:
    """The contract's name for ``error``: a worker exception name, or a builtin's name."""
    if module is not None:
        for name in WORKER_ERRORS:
            if isinstance(error, getattr(module, name)):
                return name
    from leasecheck.queue_impl.jobs import IllegalStateError

    for cls in (FileNotFoundError, IllegalStateError, KeyError, ValueError):
        if isinstance(error, cls):
            return cls.__name__
    return f"unexpected {type(error).__name__}"


def kind_from_classes(classes: Iterable[str]) -> str:
    """``error_kind`` for an error that crossed a process boundary as its class names
    (the class and its bases, most derived first)."""
    names = list(classes)
    for name in (*WORKER_ERRORS, *_BUILTIN_ERRORS):
        if name in names:
            return name
    return f"unexpected {names[0] if names else 'error'}"


def differences(
    call: str, target: LeaseOutcome, model: LeaseOutcome, accept: frozenset[str] = frozenset()
) -> list[str]:
    """One sentence for each way ``target`` differs from ``model`` (empty: they agree)."""
    found = []
    if not target.agrees_with(model, accept):
        said = f"{call} {target.describe()} on the target but {model.describe()} on the model"
        found.append(said)
    if None not in (target.hooks, model.hooks) and target.hooks != model.hooks:
        found.append(
            f"{call} called the fault hook at {list(target.hooks or ())} on the target"
            f" but at {list(model.hooks or ())} on the model"
        )
    if None not in (target.sends, model.sends) and not same(target.sends, model.sends):
        found.append(
            f"{call} called send with {list(target.sends or ())} on the target"
            f" but with {list(model.sends or ())} on the model"
        )
    if target.state is not None and model.state is not None and target.state != model.state:
        found.append(state_difference(f"after {call}", target.state, model.state))
    return found


def state_difference(when: str, target: Snapshot, model: Snapshot) -> str:
    """The sentence for two different stored states: the differing rows, then both tables."""
    return (
        f"{when} the stored state differs:\n"
        + "\n".join(snapshot_differences(target, model))
        + f"\ntarget rows:\n{target.describe()}\nmodel rows:\n{model.describe()}"
    )


def snapshot_differences(target: Snapshot, model: Snapshot) -> list[str]:
    """One line per differing row: which job or audit row, and which columns differ."""
    lines = []
    ids = list(dict.fromkeys([row.id for row in model.jobs] + [row.id for row in target.jobs]))
    for job_id in ids:
        ours, theirs = target.job(job_id), model.job(job_id)
        if ours is None or theirs is None:
            where = "target" if ours is None else "model"
            lines.append(f"  job {job_id!r} is missing on the {where}")
        elif ours != theirs:
            columns = [
                f"{f.name}: target {getattr(ours, f.name)!r}, model {getattr(theirs, f.name)!r}"
                for f in fields(ours)
                if getattr(ours, f.name) != getattr(theirs, f.name)
            ]
            lines.append(f"  job {job_id!r}: " + "; ".join(columns))
    if [r.id for r in target.jobs] != [r.id for r in model.jobs] and not lines:
        lines.append("  the jobs are in a different seq order")
    if target.redrives != model.redrives:
        lines.append(
            f"  redrives: target has {len(target.redrives)} rows, model {len(model.redrives)}"
            f"; first difference at row {_first_difference(target.redrives, model.redrives)}"
        )
    return lines


def _first_difference(left: tuple[object, ...], right: tuple[object, ...]) -> int:
    return next(
        (i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b),
        min(len(left), len(right)),
    )
