"""The batch's side of ``leasecheck check`` (``leasecheck.batch`` runs it).

What a batch prints: a line per file as it ends, then the grading table (one row per
file, one column per property, the summary's verdict words), then each failing file's
first counterexample (its first lines) and the command that replays it alone, then the
conclusion. Everything is read from the files' records, never from printed text."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from leasecheck import __version__
from leasecheck._outputs import View
from leasecheck._preflight import check_output
from leasecheck.batch import BatchResult, Job, expand, pool_size, run_batch, write_batch_json
from leasecheck.counterexample import Counterexample, head, steps_text
from leasecheck.runner import CRASHED, HOLDS, HUNG, NOT_CHECKED, NOT_PROMISED, NOT_RUN, VIOLATED

__all__ = [
    "EXAMPLE_LINES", "MESSAGE_LINES", "check_batch", "conclude", "file_line", "print_failures",
    "print_table", "shown",
]  # fmt: skip

EXAMPLE_LINES = 8
"""Lines of a failing file's first counterexample in the batch output: of its program (a
process-level scenario: of its message, which numbers the steps)."""
MESSAGE_LINES = 4
"""Lines of a program's message below it: what disagreed, and the first rows that differ."""
_FAILED = (VIOLATED, HUNG, CRASHED)


def shown(path: str | Path) -> str:
    """A file as the table names it: relative to the working directory when inside it."""
    try:
        return os.path.relpath(path) if Path(path).is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def _failing(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Its properties that did not hold: violations first, then the rest, by name."""
    rows = [p for p in record["properties"] if p["verdict"] not in (HOLDS, NOT_PROMISED)]
    return sorted(rows, key=lambda p: (p["verdict"] not in _FAILED, p["property"]))


def file_line(record: dict[str, Any], done: int, total: int, view: View) -> str:
    """``[3/20] exit 1  a.py  VIOLATED lease.agreement  (12.1 s)``, as a file ends."""
    if record["load_error"]:
        what = view.paint("cannot load")
    else:
        failing = _failing(record)
        what = ", ".join(f"{view.paint(p['verdict'])} {p['property']}" for p in failing)
        what = what or view.paint(HOLDS)
    width = len(str(total))
    return (
        f"  [{done:>{width}}/{total}] exit {record['exit_code']}  {shown(record['file'])}  "
        f"{what}  ({record['seconds']:.1f} s)"
    )


def _columns(names: list[str]) -> dict[str, str]:
    """Each property's column heading: its name without ``lease.``/``jobs.`` when that
    stays unambiguous."""
    short = {name: name.split(".", 1)[-1] for name in names}
    unique = len(set(short.values())) == len(names)
    return short if unique else {name: name for name in names}


def print_table(result: BatchResult, view: View, stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    names = sorted({p["property"] for r in result.records for p in r["properties"]})
    heads = _columns(names)
    width = {name: max(len(heads[name]), 12) for name in names}
    files = [shown(job.path) for job in result.jobs]
    left = max([len("file"), *(len(name) for name in files)])
    head = "  ".join(f"{heads[name]:<{width[name]}}" for name in names)
    print(f"\n  {'file':<{left}}  exit  {head}".rstrip(), file=stream)
    for job, name in zip(result.jobs, files, strict=True):
        print(f"  {name:<{left}}  {_cells(result, job, names, width, view)}", file=stream)
    print(file=stream)


def _cells(
    result: BatchResult, job: Job, names: list[str], width: dict[str, int], view: View
) -> str:
    record = result.record_of(job)
    if record is None:
        return f"{'-':<4}  {NOT_RUN} (the batch stopped before this file)"
    if record["load_error"]:
        return f"{record['exit_code']:<4}  cannot load: {record['load_error']}"
    verdicts = {p["property"]: p["verdict"] for p in record["properties"]}
    cells = [view.paint(verdicts[n], width[n]) if n in verdicts else f"{'-':<{width[n]}}"
             for n in names]  # fmt: skip
    problem = f"  ({record['problem']})" if record["problem"] and not verdicts else ""
    return f"{record['exit_code']:<4}  " + "  ".join(cells).rstrip() + problem


def print_failures(result: BatchResult, stream: TextIO | None = None) -> None:
    """Each failing file: its first failing property's first counterexample lines and
    the command that replays the file alone."""
    stream = stream or sys.stdout
    for record in result.records:
        if record["exit_code"] == 0 or record["load_error"]:
            continue
        failing = _failing(record)
        print(f"{shown(record['file'])}:", file=stream)
        if failing:
            print(_example(failing[0]), file=stream)
            others = [f"{p['verdict']} {p['property']}" for p in failing[1:]]
            if others:
                print(f"    also: {', '.join(others)}", file=stream)
        elif record["problem"]:
            print(f"  {record['problem']}", file=stream)
        print(f"  replay: {record['replay']}\n", file=stream)


def _example(prop: dict[str, Any]) -> str:
    example = Counterexample.from_record(prop["counterexample"] or {})
    steps = f" ({steps_text(example.steps)})" if example.steps else ""
    message = _without_row_tables("\n".join(example.message).splitlines())
    if example.program:
        lines = [*head(list(example.program), EXAMPLE_LINES), "", *head(message, MESSAGE_LINES)]
    else:
        lines = head(message, EXAMPLE_LINES)
    body = "\n".join(f"    {line}" for line in lines)
    return f"  {prop['verdict']}: {prop['property']}{steps}" + (f"\n{body}" if body else "")


def _without_row_tables(lines: list[str]) -> list[str]:
    """A state difference without its two full tables (``target rows:``, ``model rows:``
    and their indented rows): the rows that differ are listed above them, and a batch
    shows only each file's first lines (the file's own report has the tables)."""
    kept: list[str] = []
    skipping = False
    for line in lines:
        if line.strip() in ("target rows:", "model rows:"):
            skipping = True
        elif not (skipping and line.startswith("  ")):
            skipping = False
            kept.append(line)
    return kept


def conclude(result: BatchResult) -> int:
    """The last line, and the batch's exit status."""
    total = len(result.jobs)
    if result.interrupted:
        print(
            f"leasecheck: interrupted after {result.seconds:.1f} s: {len(result.records)} of "
            f"{total} files judged (above), the others did not run; nothing of the batch is "
            f"left running",
            file=sys.stderr,
        )
    elif result.exit_code == 0:
        print(f"every file holds every promised property ({total} files, {result.seconds:.1f} s)")
    elif result.exit_code == 1:
        failed = [shown(r["file"]) for r in result.records if r["exit_code"] == 1]
        print(f"violated in {len(failed)} of {total} files: {', '.join(failed)}")
    else:
        print(f"leasecheck: not everything could be checked: {_why(result)}", file=sys.stderr)
    return result.exit_code


def _incomplete(record: dict[str, Any]) -> bool:
    verdicts = {p["verdict"] for p in record["properties"]}
    return record["exit_code"] == 2 or bool(verdicts & {NOT_CHECKED, NOT_RUN})


def _why(result: BatchResult) -> str:
    unloaded = [shown(r["file"]) for r in result.records if r["load_error"]]
    incomplete = [shown(r["file"]) for r in result.records
                  if not r["load_error"] and _incomplete(r)]  # fmt: skip
    missing = [shown(j.path) for j in result.jobs if result.record_of(j) is None]
    parts = [f"cannot load {', '.join(unloaded)}"] if unloaded else []
    parts += [f"not everything checked in {', '.join(incomplete)}"] if incomplete else []
    parts += [f"not run: {', '.join(missing)}"] if missing else []
    violated = sum(1 for r in result.records if r["exit_code"] == 1)
    files = "file" if violated == 1 else "files"
    tail = f" (and {violated} {files} violated a property)" if violated else ""
    return "; ".join(parts) + tail


_SINGLE_ONLY = (
    ("export", "--export"), ("report", "--report"), ("junit_xml", "--junit-xml"),
    ("adapter", "--adapter"), ("strict", "--strict"), ("servers", "--servers"),
)  # fmt: skip


def _jobs(args: argparse.Namespace) -> list[Job]:
    from leasecheck.cli import UsageError

    for name, option in _SINGLE_ONLY:
        if getattr(args, name):
            raise UsageError(
                f"{option} checks one target; drop it from the batch, or run "
                f"`leasecheck check --impl FILE {option} ...` on the file you want it for"
            )
    try:
        return expand("--impl", args.impl or []) + expand("--jobs-impl", args.jobs_impl or [])
    except ValueError as error:
        raise UsageError(str(error)) from None


def check_batch(args: argparse.Namespace) -> int:
    """``leasecheck check --impl A B ...``: the batch, its table, ``--json``, its exit status."""
    from leasecheck.cli import _db, _properties

    jobs = _jobs(args)
    settings = {
        "profile": args.profile, "seed": args.seed,
        "properties": list(_properties(args.property)), "db": _db(args.db),
    }  # fmt: skip
    if args.json is not None:
        check_output("--json", args.json, directory=False)
    size = pool_size(args.workers, len(jobs))
    print(
        f"leasecheck {__version__}: profile {args.profile}, seed {args.seed}, -n {args.workers}: "
        f"a batch of {len(jobs)} files, {size} at a time\n",
        flush=True,
    )
    view, done = View(sys.stdout), [0]

    def on_record(record: dict[str, Any]) -> None:
        done[0] += 1
        print(file_line(record, done[0], len(jobs), view), flush=True)

    result = run_batch(jobs, settings, args.workers, on_record)
    print_table(result, view)
    print_failures(result)
    if args.json is not None:
        write_batch_json(args.json, result)
    return conclude(result)
