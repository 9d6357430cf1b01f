"""The ``leasecheck`` command: ``check``, ``mutants``, ``explore`` and ``adapters``.

``leasecheck check [--impl PATH] [--jobs-impl PATH] [--profile quick|ci|deep]
[--seed N] [-n N|auto] [--export DIR] [--junit-xml FILE]`` is a stable interface
(suite.md): exit 0 when every property holds, 1 when one is violated (or the
target hangs, exits or crashes while checked), 2 for a usage error or a target
that cannot be loaded, and never 0 when something could not run. ``--adapter
NAME|PATH`` (an addition) checks a real queue library: exit 1 only when a property
the library promises is violated; one it does not promise is reported as "not
promised" and changes the exit status only with ``--strict``.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from leasecheck import __version__
from leasecheck.counterexample import export, parse
from leasecheck.runner import (
    NOT_PROMISED,
    VIOLATED,
    CheckOptions,
    CheckResult,
    PropertyResult,
    run_check,
)

__all__ = ["main"]

USAGE_EXIT, VIOLATION_EXIT = 2, 1
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
    commands = parser.add_subparsers(dest="command", metavar="{check,mutants,explore,adapters}")
    commands.required = True
    check = commands.add_parser("check", help="check a target against every property")
    check.add_argument("--impl", metavar="PATH", type=Path, help="a lease worker file (worker.py)")
    check.add_argument("--jobs-impl", metavar="PATH", type=Path, help="a file defining JobQueue")
    _add_adapter_options(check)
    _add_run_options(check)
    check.add_argument("--export", metavar="DIR", type=Path, help="write counterexamples here")
    check.add_argument("--junit-xml", metavar="FILE", type=Path, help="write a JUnit XML report")
    mutants = commands.add_parser("mutants", help="self-check: every planted bug must be caught")
    _add_run_options(mutants)
    mutants.add_argument("--only", metavar="NAME", nargs="+", help="check only these mutants")
    mutants.add_argument("--list", action="store_true", help="list the catalogue and exit")
    commands.add_parser("explore", help="exhaustive model checking (see explore --help)")
    commands.add_parser("adapters", help="list the bundled queue-library adapters and promises")
    for sub in (check, mutants):
        sub.__class__ = _Parser
    return parser


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
    if words[:1] == ["explore"]:
        return _guarded(lambda: _explore(words[1:]))  # explore parses its own options
    args = _parser().parse_args(words)
    return _guarded(lambda: _run(args))


def _guarded(command: Callable[[], int]) -> int:
    try:
        return command()
    except UsageError as error:
        print(f"leasecheck: error: {error}", file=sys.stderr)
        return USAGE_EXIT
    except KeyboardInterrupt:
        print("leasecheck: interrupted; nothing was concluded", file=sys.stderr)
        return USAGE_EXIT


def _run(args: argparse.Namespace) -> int:
    if args.command == "check":
        return _check(args)
    if args.command == "adapters":
        from leasecheck.adapters_cli import adapters_command

        return adapters_command()
    from leasecheck.selfcheck import mutants_command

    return mutants_command(args)


def _explore(rest: list[str]) -> int:
    try:
        from leasecheck.explore import main as explore_main
    except ModuleNotFoundError as error:
        raise UsageError("this installation has no model checker (leasecheck.explore)") from error
    return explore_main(rest)


# --- check ------------------------------------------------------------------------


def preflight(option: str, path: Path) -> Path:
    """Load the target in a throwaway process: a clean exit-2 message if it cannot load."""
    if not path.is_file():
        what = "a lease worker file such as worker.py" if option == "--impl" else "a JobQueue file"
        raise UsageError(f"{option} {str(path)!r} is not a file; pass the path of {what}")
    loader = "load_worker" if option == "--impl" else "load_jobs_target"
    code = (
        "import sys\nfrom leasecheck.targets import TargetError, " + loader + "\n"
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
    if args.export is not None and args.export.exists() and not args.export.is_dir():
        raise UsageError(f"--export {str(args.export)!r} is a file; pass a directory")
    if args.junit_xml is not None and args.junit_xml.is_dir():
        raise UsageError(f"--junit-xml {str(args.junit_xml)!r} is a directory; pass a file path")
    return CheckOptions(
        impl=impl, jobs_impl=jobs, profile=args.profile, seed=args.seed, workers=args.workers,
        junit_xml=args.junit_xml.resolve() if args.junit_xml else None,
        adapter=_adapter(args), strict=args.strict,
    )  # fmt: skip


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
    options = _options(args)
    _print_header(options)
    try:
        result = run_check(options, on_event=_progress)
    except ValueError as error:  # a bad setting in the environment
        raise UsageError(str(error)) from None
    _print_summary(result)
    for prop in result.properties.values():
        if prop.verdict != "holds":
            _print_failure(prop, options, args.export)
    return _conclude(result)


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


def _progress(nodeid: str, result: PropertyResult) -> None:
    test = nodeid.rsplit("::", 1)[-1]
    print(f"  {result.verdict:<9} {result.name:<22} {test}", flush=True)


def _print_summary(result: CheckResult) -> None:
    rows = sorted(result.properties.values(), key=lambda r: r.name)
    runs = {row.name: "; ".join(row.runs) or "-" for row in rows}
    width = max([len("checked"), *(len(text) for text in runs.values())])
    verdict = max([9, *(len(row.verdict) for row in rows)])  # "not promised" is wider
    print(f"\n  {'property':<22} {'verdict':<{verdict}} {'checked':<{width}} {'time':>8}")
    for row in rows:
        print(
            f"  {row.name:<22} {row.verdict:<{verdict}} {runs[row.name]:<{width}} "
            f"{row.seconds:>7.1f}s"
        )
    print(f"  {'total':<22} {'':<{verdict}} {'':<{width}} {result.seconds:>7.1f}s\n")


def _print_not_promised(prop: PropertyResult, options: CheckOptions) -> None:
    """A failure the library does not promise: its reason and counterexample, plainly."""
    lines = "\n".join(prop.details).splitlines()
    shown = lines[:40] + ([f"... ({len(lines) - 40} more lines)"] if len(lines) > 40 else [])
    print(f"{NOT_PROMISED}: {prop.name} (a documented limitation, not a violation)")
    print("\n".join(f"    {line}" for line in shown))
    print(f"  replay: {replay_command(options)}\n")


def _print_failure(prop: PropertyResult, options: CheckOptions, directory: Path | None) -> None:
    if prop.verdict == NOT_PROMISED:
        _print_not_promised(prop, options)
        return
    report = "\n".join(prop.details)
    example = parse(report)
    steps = f" ({example.steps} steps)" if example.steps else ""
    print(f"{prop.verdict}: {prop.name}{steps}")
    print("\n".join(f"    {line}" for line in example.text().splitlines()) or report[-3000:])
    print(f"  replay: {replay_command(options)}")
    exportable = not prop.name.startswith("queue.")  # adapters replay with the command above
    if directory is not None and prop.verdict == VIOLATED and prop.nodeids and exportable:
        target, option = _target_of(prop.name, options)
        path = export(
            directory, prop.name, example, target=target, option=option,
            profile=options.profile, seed=options.seed, nodeid=prop.nodeids[0],
        )  # fmt: skip
        print(f"  exported: {path}  (run: pytest {path})")
    print()


def _target_of(name: str, options: CheckOptions) -> tuple[Path, str]:
    from leasecheck.targets import BUNDLED_JOBS, BUNDLED_WORKER

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
    return " ".join(shlex.quote(word) for word in words)


def _conclude(result: CheckResult) -> int:
    unpromised = sorted(r.name for r in result.properties.values() if r.verdict == NOT_PROMISED)
    if result.exit_code == 0 and unpromised:
        held = len(result.properties) - len(unpromised)
        print(
            f"no promised property is violated ({held} hold); not promised by the library "
            f"and failing: {', '.join(unpromised)} (exit 0; --strict makes these fail)"
        )
    elif result.exit_code == 0:
        print(f"every property holds ({len(result.properties)} checked)")
    elif result.exit_code == VIOLATION_EXIT:
        failed = [
            r.name for r in result.properties.values() if r.verdict not in ("holds", NOT_PROMISED)
        ]
        print(f"violated: {', '.join(sorted(failed))}")
    else:
        print(f"leasecheck: not everything could be checked: {_why(result)}", file=sys.stderr)
    return result.exit_code


def _why(result: CheckResult) -> str:
    not_run = [r.name for r in result.properties.values() if r.verdict == "not run"]
    if result.problem:
        return result.problem
    if not_run:
        return f"these properties did not run: {', '.join(sorted(not_run))}"
    tail = [line for line in result.log.strip().splitlines() if line.strip()][-5:]
    return "pytest said:\n  " + "\n  ".join(tail) if tail else "no property was collected"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
