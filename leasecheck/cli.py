"""The ``leasecheck`` command: ``check``, ``mutants``, ``explore``, ``hunt`` and ``adapters``.

``leasecheck check [--impl PATH] [--jobs-impl PATH] [--profile quick|ci|deep]
[--seed N] [-n N|auto] [--export DIR] [--junit-xml FILE]`` is a stable interface
(suite.md): exit 0 when every property holds, 1 when one is violated (or the
target hangs, exits or crashes while checked), 2 for a usage error or a target
that cannot be loaded, and never 0 when something could not run. ``--adapter
NAME|PATH`` (an addition) checks a real queue library: exit 1 only when a property
the library promises is violated; one it does not promise is reported as "not
promised" and changes the exit status only with ``--strict``. Several files (or a
directory) after ``--impl`` or ``--jobs-impl`` are a batch (``leasecheck.batch``): one
grading table, exit 2 if any file could not be loaded or checked, else 1 if any file
violated a property, else 0.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from leasecheck import __version__
from leasecheck._outputs import View, write_json, write_junit
from leasecheck._preflight import SetupError, check_output
from leasecheck.counterexample import export, head, steps_text
from leasecheck.runner import (
    CRASHED,
    HUNG,
    NOT_CHECKED,
    NOT_PROMISED,
    NOT_RUN,
    VIOLATED,
    CheckOptions,
    CheckResult,
    PropertyResult,
    run_check,
)

__all__ = ["main"]

USAGE_EXIT, VIOLATION_EXIT, SIGINT_EXIT = 2, 1, 128 + signal.SIGINT
LOAD_TIMEOUT = 60.0


class UsageError(Exception):
    """A mistake on the command line; the message says what to do instead."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        hint = f"run `{self.prog} --help` to see every option"
        self.exit(USAGE_EXIT, f"{self.prog}: error: {message}; {hint}\n")


def _workers(value: str) -> str:
    if value == "auto" or (value.isdigit() and int(value) >= 0):
        return value
    raise argparse.ArgumentTypeError(f"-n takes a number of workers or 'auto', not {value!r}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="leasecheck", description="Verify lease-based retrying job queues.")
    parser.add_argument("--version", action="version", version=f"leasecheck {__version__}")
    commands = parser.add_subparsers(
        dest="command", metavar="{check,mutants,explore,hunt,adapters}"
    )
    commands.required = True
    check = commands.add_parser(
        "check", help="check a target against every property", epilog=HELP_BATCH
    )
    check.add_argument(
        "--impl", metavar="PATH", type=Path, nargs="+",
        help=HELP_IMPL + "; several, or a directory: a batch",
    )  # fmt: skip
    check.add_argument(
        "--jobs-impl", metavar="PATH", type=Path, nargs="+",
        help="a file defining JobQueue; several, or a directory: a batch",
    )  # fmt: skip
    _add_adapter_options(check)
    _add_run_options(check)
    check.add_argument("--export", metavar="DIR", type=Path, help="write counterexamples here")
    check.add_argument("--junit-xml", metavar="FILE", type=Path, help="write a JUnit XML report")
    check.add_argument(
        "--json", metavar="FILE", type=Path, help="write one JSON record per property to FILE"
    )
    check.add_argument(
        "--report", metavar="DIR", type=Path, help="write DIR/index.html with pictures"
    )
    check.add_argument("--db", metavar="URL", help=HELP_DB)
    check.add_argument(
        "--servers", action="store_true",
        help="with --adapter: also the server faults (server-crash, zombie-pause, clock-skew, "
        "server-pause)",
    )  # fmt: skip
    check.add_argument(
        "--property", metavar="NAME", action="append", default=[],
        help="check only property NAME (repeatable), e.g. --property queue.stale-ack",
    )  # fmt: skip
    mutants = commands.add_parser("mutants", help="self-check: every planted bug must be caught")
    _add_run_options(mutants)
    mutants.add_argument("--only", metavar="NAME", nargs="+", help="check only these mutants")
    mutants.add_argument("--list", action="store_true", help="list the catalogue and exit")
    explore = commands.add_parser(
        "explore", help="exhaustive model checking", description=explore_doc()
    )
    add_explore_arguments(explore)
    hunt = _add_hunt_parser(commands)
    adapters = commands.add_parser(
        "adapters", help="list the bundled queue-library adapters; `adapters new NAME`: a template"
    )
    adapters.add_argument("action", nargs="?", choices=["new"], help="new: write a template")
    adapters.add_argument("name", nargs="?", help="with new: the adapter's name, e.g. my-queue")
    for sub in (check, mutants, explore, hunt, adapters):
        sub.__class__ = _Parser
    return parser


HELP_IMPL = "a lease worker file (worker.py)"
HELP_BATCH = (
    "batch mode (for a class): several files or a directory after --impl or --jobs-impl "
    "(every *.py in it but __init__.py and conftest.py) are checked in one run, -n files at "
    "a time, each as it would be alone, and printed as one grading table (file, verdict per "
    "property, each failing file's first counterexample and replay command); --json writes "
    "one record per file. Exit status of a batch: 2 if any file could not be loaded or "
    "anything was not checked, else 1 if any file violated a property, else 0; 130 on "
    "Ctrl-C, with nothing left running."
)
HELP_HUNT_PROFILE = "the check profile whose programs to generate (its check replays every find)"
HELP_DB = "shared example database, redis://HOST:PORT/N (replayed first; read-only in ci)"


def _add_hunt_parser(commands: Any) -> argparse.ArgumentParser:
    hunt: argparse.ArgumentParser = commands.add_parser(
        "hunt", help="long bug hunt under HypoFuzz, sharing finds through --db"
    )
    hunt.add_argument("--impl", metavar="PATH", type=Path, help=HELP_IMPL)
    hunt.add_argument("--jobs-impl", metavar="PATH", type=Path, help="a file defining JobQueue")
    hunt.add_argument("--adapter", metavar="NAME|PATH", help="a queue library adapter (to pytest)")
    hunt.add_argument("--db", metavar="URL", help="shared example database, redis://HOST:PORT/N")
    hunt.add_argument("--minutes", metavar="M", type=_minutes, default=60.0)
    profiles = ("quick", "ci", "deep")
    hunt.add_argument("--profile", choices=profiles, default="ci", help=HELP_HUNT_PROFILE)
    hunt.add_argument("-n", dest="workers", metavar="N|auto", type=_workers, default="auto")
    hunt.add_argument("--dashboard", metavar="PORT", type=int, help="serve HypoFuzz's dashboard")
    return hunt


def _minutes(value: str) -> float:
    try:
        minutes = float(value)
    except ValueError:
        minutes = -1.0
    if minutes <= 0:
        raise argparse.ArgumentTypeError(f"--minutes takes a positive number, not {value!r}")
    return minutes


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", choices=("quick", "ci", "deep"), default="ci")
    parser.add_argument("--seed", metavar="N", type=int, default=0)
    parser.add_argument("-n", dest="workers", metavar="N|auto", type=_workers, default="auto")


def _add_adapter_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--adapter", metavar="NAME|PATH",
        help="check a queue library: a bundled adapter name or your adapter file",
    )  # fmt: skip
    parser.add_argument(
        "--strict", action="store_true",
        help="with --adapter: a property the library does not promise fails too (exit 1)",
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(words)
    return _guarded(lambda: _run(args))


def _guarded(command: Callable[[], int]) -> int:
    try:
        return command()
    except UsageError as error:
        print(f"leasecheck: error: {error}", file=sys.stderr)
        return USAGE_EXIT
    except SetupError as error:
        print(f"leasecheck: cannot check here: {error}", file=sys.stderr)
        return USAGE_EXIT
    except KeyboardInterrupt:
        print("leasecheck: interrupted; nothing was concluded", file=sys.stderr)
        return SIGINT_EXIT


def _run(args: argparse.Namespace) -> int:
    if args.command == "check":
        return _check(args)
    if args.command == "explore":
        from leasecheck.explore import explore_command

        return explore_command(args)
    if args.command == "hunt":
        return _hunt(args)
    if args.command == "adapters":
        from leasecheck.adapters_cli import AdapterUsageError, adapters_command, new_adapter

        if args.action is None:
            return adapters_command()
        try:
            return new_adapter(args.name, Path.cwd())
        except AdapterUsageError as error:
            raise UsageError(str(error)) from None
    from leasecheck.selfcheck import mutants_command

    return mutants_command(args)


def explore_doc() -> str:
    import leasecheck.explore

    return (leasecheck.explore.__doc__ or "").strip()


def add_explore_arguments(parser: argparse.ArgumentParser) -> None:
    from leasecheck.explore import add_arguments

    add_arguments(parser)


# --- check ------------------------------------------------------------------------


def preflight(option: str, path: Path) -> Path:
    """Load the target in a throwaway process: a clean exit-2 message if it cannot load."""
    if not path.is_file():
        what = "a lease worker file such as worker.py" if option == "--impl" else "a JobQueue file"
        raise UsageError(f"{option} {str(path)!r} is not a file; pass the path of {what}")
    loader = "load_worker" if option == "--impl" else "load_jobs_target"
    code = (
        "import sys\nfrom leasecheck.targets.loader import TargetError, " + loader + "\n"
        "try:\n    " + loader + "(sys.argv[1])\n"
        "except TargetError as e:\n    print(e, file=sys.stderr); sys.exit(2)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True,
            timeout=LOAD_TIMEOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"{option} {str(path)!r} did not finish importing within {LOAD_TIMEOUT:.0f} s; "
            f"move work done at import time into functions"
        ) from None
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise UsageError(f"cannot load {option} {str(path)!r}: {message[0]}")
    return path.resolve()


def _options(args: argparse.Namespace) -> CheckOptions:
    impl = preflight("--impl", args.impl) if args.impl else None
    jobs = preflight("--jobs-impl", args.jobs_impl) if args.jobs_impl else None
    # Checked before the run: a path that cannot be written fails now, not after it.
    for option, path, directory in (
        ("--export", args.export, True), ("--report", args.report, True),
        ("--junit-xml", args.junit_xml, False), ("--json", args.json, False),
    ):  # fmt: skip
        if path is not None:
            check_output(option, path, directory=directory)
    return CheckOptions(
        impl=impl, jobs_impl=jobs, profile=args.profile, seed=args.seed, workers=args.workers,
        junit_xml=args.junit_xml.resolve() if args.junit_xml else None, db=_db(args.db),
        adapter=_adapter(args), strict=args.strict, properties=_properties(args.property),
        servers=args.servers,
    )  # fmt: skip


def _properties(names: list[str]) -> tuple[str, ...]:
    """``--property`` values, each a known property (exit 2 with the closest name if not)."""
    from leasecheck.selection import unknown_property

    if names and (problem := unknown_property(names)) is not None:
        raise UsageError(problem)
    return tuple(names)


def _db(url: str | None) -> str | None:
    """``--db`` (or ``$LEASECHECK_DB``), checked now: a bad URL or no Redis is exit 2."""
    from leasecheck.shared_db import DB_ENV, SharedDatabaseError, ping

    where = "--db" if url else f"${DB_ENV}"
    url = url or os.environ.get(DB_ENV)
    if not url:
        return None
    try:
        ping(url, where)
    except SharedDatabaseError as error:
        raise UsageError(str(error)) from None
    return url


def _hunt(args: argparse.Namespace) -> int:
    from leasecheck.hunt import HuntOptions, hunt_command
    from leasecheck.shared_db import SharedDatabaseError

    options = HuntOptions(
        impl=preflight("--impl", args.impl) if args.impl else None,
        jobs_impl=preflight("--jobs-impl", args.jobs_impl) if args.jobs_impl else None,
        adapter=args.adapter, db=_db(args.db), minutes=args.minutes,
        workers=args.workers, dashboard_port=args.dashboard, profile=args.profile,
    )  # fmt: skip
    try:
        return hunt_command(options)
    except SharedDatabaseError as error:
        raise UsageError(str(error)) from None


def _adapter(args: argparse.Namespace) -> str | None:
    """The ``--adapter`` value, loaded once (exit 2 with a sentence if it cannot be)."""
    from leasecheck.adapters_cli import AdapterUsageError, preflight_adapter

    if args.strict and not args.adapter:
        raise UsageError("--strict applies to --adapter; add --adapter NAME|PATH or drop it")
    if not args.adapter:
        return None
    spec = str(Path(args.adapter).resolve()) if args.adapter.endswith(".py") else args.adapter
    try:
        _ADAPTER_SEEN[spec] = preflight_adapter(spec)
    except AdapterUsageError as error:
        raise UsageError(str(error)) from None
    return spec


_ADAPTER_SEEN: dict[str, str] = {}
"""--adapter value -> "name version", from the preflight, for the header."""


def _check(args: argparse.Namespace) -> int:
    from leasecheck.batch import is_batch

    if is_batch(args.impl or [], args.jobs_impl or []):
        from leasecheck._batch_cli import check_batch

        return check_batch(args)
    # One file for each option at most: the single check, exactly as before the batch.
    args.impl = args.impl[0] if args.impl else None
    args.jobs_impl = args.jobs_impl[0] if args.jobs_impl else None
    options = _options(args)
    _print_header(options)
    view = View(sys.stdout)
    try:
        result = run_check(options, on_event=view.event, on_tick=view.tick)
    except ValueError as error:  # a bad setting in the environment
        raise UsageError(str(error)) from None
    finally:
        view.clear()
    _print_summary(result, view)
    _write_records(args, result, options)
    if result.interrupted:
        return _interrupted(result)
    # Violations first: a limitation the target does not promise is read after them.
    failed = [p for p in result.properties.values() if p.verdict not in ("holds", NOT_RUN)]
    for prop in sorted(failed, key=lambda prop: prop.verdict == NOT_PROMISED):
        _print_failure(prop, options, args.export)
    if args.export is not None and not any(p.verdict == VIOLATED for p in failed):
        unpromised = sum(p.verdict == NOT_PROMISED for p in failed)
        print(f"--export {args.export}: nothing exported: only VIOLATED counterexamples are "
              f"written ({unpromised} not promised; --strict makes those VIOLATED)\n")  # fmt: skip
    if args.report is not None:
        from leasecheck.report import write_report

        rows, replay = list(result.properties.values()), replay_command(options)
        path = write_report(args.report, rows, replay=replay, adapter=options.adapter)
        print(f"report: {path}\n")
    return _conclude(result)


def _write_records(args: argparse.Namespace, result: CheckResult, options: CheckOptions) -> None:
    """``--json`` and ``--junit-xml``: every verdict as data (partial after a signal)."""
    replay = replay_command(options)
    if args.json is not None:
        write_json(args.json, result, replay)
    if args.junit_xml is not None:
        write_junit(args.junit_xml, result, lambda prop: _failure_text(prop, replay))


def _failure_text(prop: PropertyResult, replay: str) -> str:
    example = prop.counterexample
    text = example.text(limit=200) if example else ""
    return f"{text}\nreplay: {replay}".strip()


def _interrupted(result: CheckResult) -> int:
    name = signal.Signals(result.interrupted).name
    judged = sum(1 for prop in result.properties.values() if prop.verdict != NOT_RUN)
    print(
        f"leasecheck: interrupted by {name} after {result.seconds:.1f} s: {judged} of "
        f"{len(result.properties)} properties judged (above), the others did not run; "
        f"nothing of the run is left running",
        file=sys.stderr,
    )
    return result.exit_code


def _describe_target(path: Path | None, bundled: str, option: str) -> str:
    return f"{path}" if path else f"{bundled} (bundled; {option} PATH checks yours)"


def _print_header(options: CheckOptions) -> None:
    print(
        f"leasecheck {__version__}: profile {options.profile}, seed {options.seed}, "
        f"-n {options.workers}"
    )
    if options.adapter:
        print(f"  queue library: {_ADAPTER_SEEN.get(options.adapter, '')} ({options.adapter})")
    if options.impl or not (options.jobs_impl or options.adapter):
        print(f"  lease worker: {_describe_target(options.impl, 'queue_impl/worker.py', '--impl')}")
    if options.jobs_impl or not (options.impl or options.adapter):
        jobs = _describe_target(options.jobs_impl, "queue_impl/job_queue.py", "--jobs-impl")
        print(f"  job queue:    {jobs}")
    print(flush=True)


def _print_summary(result: CheckResult, view: View) -> None:
    rows = sorted(result.properties.values(), key=lambda r: r.name)
    # A property that failed covered less than it set out to: its figure would mislead.
    runs = {row.name: "; ".join(row.runs) if row.verdict != VIOLATED else "" for row in rows}
    runs = {name: text or "-" for name, text in runs.items()}
    width = max([len("checked"), *(len(text) for text in runs.values())])
    verdict = max([9, *(len(row.verdict) for row in rows)])  # "not promised" is wider
    print(
        f"\n  {'property':<22} {'verdict':<{verdict}} {'checked':<{width}} {'time':>8} "
        f"{'setup':>7} {'teardown':>8}"
    )
    for row in rows:
        print(
            f"  {row.name:<22} {view.paint(row.verdict, verdict)} {runs[row.name]:<{width}} "
            f"{row.seconds:>7.1f}s {row.phase('setup'):>6.1f}s {row.phase('teardown'):>7.1f}s"
        )
    setup, teardown = (sum(row.phase(when) for row in rows) for when in ("setup", "teardown"))
    print(
        f"  {'total':<22} {'':<{verdict}} {'':<{width}} {result.seconds:>7.1f}s "
        f"{setup:>6.1f}s {teardown:>7.1f}s\n"
    )


def _print_not_promised(prop: PropertyResult, options: CheckOptions) -> None:
    """A failure the library does not promise: its reason and counterexample, plainly."""
    lines = "\n".join(prop.details).splitlines()
    shown = head(lines, 40)
    print(f"{NOT_PROMISED}: {prop.name} (a documented limitation, not a violation)")
    print("\n".join(f"    {line}" for line in shown))
    print(f"  replay: {replay_command(options)}\n")


def _print_failure(prop: PropertyResult, options: CheckOptions, directory: Path | None) -> None:
    if prop.verdict == NOT_PROMISED:
        _print_not_promised(prop, options)
        return
    if prop.verdict == NOT_CHECKED:
        print(f"{prop.verdict}: {prop.name}\n    {_unchecked_reason(prop)}")
        print(f"  replay: {replay_command(options)}\n")
        return
    example = prop.counterexample
    steps = f" ({steps_text(example.steps)})" if example and example.steps else ""
    print(f"{prop.verdict}: {prop.name}{steps}")
    if example is not None:
        print("\n".join(f"    {line}" for line in example.text().splitlines()))
    print(f"  replay: {replay_command(options)}")
    if directory is not None and example and prop.verdict == VIOLATED and prop.nodeids:
        target, option = _target_of(prop.name, options)
        path = export(
            directory, prop.name, example, target=target, option=option,
            profile=options.profile, seed=options.seed, nodeid=prop.nodeids[0],
        )  # fmt: skip
        print(f"  exported: {path}  (run: pytest {path})")
    print()


def _target_of(name: str, options: CheckOptions) -> tuple[Path | str, str]:
    from leasecheck.targets.loader import BUNDLED_JOBS, BUNDLED_WORKER

    if name.startswith("queue.") and options.adapter:
        return options.adapter, "--adapter"
    if name.startswith("jobs."):
        return options.jobs_impl or BUNDLED_JOBS, "--jobs-impl"
    return options.impl or BUNDLED_WORKER, "--impl"


def replay_command(options: CheckOptions) -> str:
    words = ["leasecheck", "check"]
    if options.impl:
        words += ["--impl", str(options.impl)]
    if options.jobs_impl:
        words += ["--jobs-impl", str(options.jobs_impl)]
    if options.adapter:
        words += ["--adapter", options.adapter] + (["--strict"] if options.strict else [])
    words += ["--profile", options.profile, "--seed", str(options.seed)]
    if options.db:
        words += ["--db", options.db]
    return " ".join(shlex.quote(word) for word in words)


def _unpromised(names: list[str]) -> str:
    """Which failing properties nobody promised, and the switch that makes each fail: the
    spec's own power-loss setting (a ``lease.`` property) or a library's (``--strict``)."""
    spec = [name for name in names if name.startswith("lease.")]
    library = [name for name in names if name not in spec]
    parts = (
        [
            f"not promised by the spec and failing: {', '.join(spec)} "
            "(exit 0; LEASECHECK_POWER_LOSS=strict makes it fail)"
        ]
        if spec
        else []
    )
    parts += [f"not promised by the library and failing: {', '.join(library)} "
              "(exit 0; --strict makes these fail)"] if library else []  # fmt: skip
    return "; ".join(parts)


def _conclude(result: CheckResult) -> int:
    unpromised = sorted(r.name for r in result.properties.values() if r.verdict == NOT_PROMISED)
    if result.exit_code == 0 and unpromised:
        held = len(result.properties) - len(unpromised)
        print(f"no promised property is violated ({held} hold); " + _unpromised(unpromised))
    elif result.exit_code == 0:
        print(f"every property holds ({len(result.properties)} checked)")
    elif result.exit_code == VIOLATION_EXIT:
        rows = result.properties.values()
        words = ((VIOLATED, "violated"), (HUNG, "hung"), (CRASHED, "crashed"))
        failed = [
            f"{word}: {', '.join(sorted(r.name for r in rows if r.verdict == verdict))}"
            for verdict, word in words
            if any(r.verdict == verdict for r in rows)
        ]
        not_run = [r.name for r in rows if r.verdict == NOT_RUN]
        after = f"; not run after it: {', '.join(sorted(not_run))}" if not_run else ""
        print("; ".join(failed) + after)
    else:
        print(f"leasecheck: not everything could be checked: {_why(result)}", file=sys.stderr)
    return result.exit_code


def _unchecked_reason(result: PropertyResult) -> str:
    record = result.figures.get("not_checked")
    if isinstance(record, dict):
        return f"{record.get('what', '?')}; {record.get('change', '?')}"
    return "no figure was recorded"


def _why(result: CheckResult) -> str:
    not_run = [r.name for r in result.properties.values() if r.verdict == "not run"]
    unchecked = [r for r in result.properties.values() if r.verdict == NOT_CHECKED]
    if result.problem:
        return result.problem
    if unchecked:
        return "these properties exercised nothing: " + "; ".join(
            f"{r.name} ({_unchecked_reason(r)})" for r in unchecked
        )
    if not_run:
        return f"these properties did not run: {', '.join(sorted(not_run))}"
    tail = [line for line in result.log.strip().splitlines() if line.strip()][-5:]
    return "pytest said:\n  " + "\n  ".join(tail) if tail else "no property was collected"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
