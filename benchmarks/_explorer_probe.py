"""One exploration in a fresh process, for ``bench_explorer.py``: figures, or digests.

Run as ``python _explorer_probe.py TREE SYSTEM SCOPE_JSON MODE`` (MODE: ``time``,
``digest-explore``, or ``digest``, which also replays on the bundled target): it imports leasecheck
from the source tree ``TREE`` (this checkout or an exported older commit), so the
same probe measures both implementations. Prints one JSON object. Digests are sums of
``hash`` of the repr of each state and edge written as plain tuples (run with
PYTHONHASHSEED=0; ``hash(None)`` differs between processes, a repr does not),
so two implementations that explore the same graph print the same digests.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

MASK = 2**64 - 1


def lease_key(world: Any) -> tuple[object, ...]:
    rows = tuple(
        (r.id, r.qty, r.status, r.attempts, r.max_attempts, r.token, r.available_at,
         r.deadline, r.owner, r.lease_until, r.reason)
        for r in world.queue.jobs
    )  # fmt: skip
    audits = tuple((r.id, r.token, r.at_ms, r.note) for r in world.queue.redrives)
    return (rows, audits, world.held, world.now)


def jobs_key(world: Any) -> tuple[object, ...]:
    jobs = tuple(
        (j.id, j.type, j.payload, j.priority, j.run_at, j.status.name, j.attempts,
         j.last_error, j.token, j.lease_until)
        for j in world.state.jobs
    )  # fmt: skip
    return (jobs, world.state.next_token, world.held, world.now, world.retries_left)


def result_repr(value: object) -> str:
    if hasattr(value, "token") and hasattr(value, "job_id"):  # a Lease
        return repr((value.job_id, value.token, value.attempt, value.lease_until))  # type: ignore[attr-defined]
    return repr(value)


def known(cls: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` without the ones an older tree's scope lacks (they must be at their
    default there: a part that needs one cannot be compared with that tree)."""
    have = cls.__dataclass_fields__
    for name in set(fields) - set(have):
        default = {"start": None, "max_depth": None, "unreached": (), "refused_args": False,
                   "seed": None}.get(name, fields[name])  # fmt: skip
        if fields[name] != default:
            raise SystemExit(f"{cls.__name__} of this tree has no field {name!r}")
    return {name: value for name, value in fields.items() if name in have}


def main(system_name: str, scope_json: str, mode: str) -> dict[str, Any]:
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(scope_json).items()
    }
    system: Any
    result: Any
    if system_name == "lease":
        from leasecheck.models.lease_explorer import LeaseScope, explore_lease

        scope: Any = LeaseScope(**known(LeaseScope, fields))
        started, cpu = time.perf_counter(), time.process_time()
        system, result = explore_lease(scope)
        key = lease_key
    else:
        from leasecheck.job_conformance import probe_clear_error, probe_expiry_on_error
        from leasecheck.models.job_explorer import JobScope, explore_jobs
        from leasecheck.targets.loader import load_jobs_target

        scope = JobScope(**known(JobScope, fields))
        cls = load_jobs_target()
        readings = probe_clear_error(cls), probe_expiry_on_error(cls)
        started, cpu = time.perf_counter(), time.process_time()
        system, result = explore_jobs(scope, *readings)
        key = jobs_key
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    explorer_file = sys.modules[type(system).__module__].__file__
    out: dict[str, Any] = {
        "imported_from": str(Path(str(explorer_file)).resolve().parents[1]),
        "states": result.states, "transitions": result.transitions, "depth": result.depth,
        "exhausted": result.exhausted, "seconds": seconds, "cpu_seconds": cpu_seconds,
        "ok": result.ok,
        "violation": None if result.violation is None else result.violation.render(system),
        "missing": list(result.missing), "coverage": dict(sorted(result.coverage.items())),
    }  # fmt: skip
    if mode.startswith("digest"):
        out["state_digest"] = sum(hash(repr(key(s))) for s in result.parents) & MASK
        out["edge_digest"] = sum(
            hash(repr((key(e.source), e.move.op, key(e.target), key(e.move.state),
                       e.move.error, e.move.hooks, e.move.counts, result_repr(e.move.result))))
            for e in result.edges
        ) & MASK  # fmt: skip
    if mode == "digest":
        out.update(replay(system_name, system, result))
    return out


def replay(system_name: str, system: Any, result: Any) -> dict[str, Any]:
    """The conformance verdict on the bundled target, with its figures."""
    from leasecheck.targets.loader import load_jobs_target, load_worker
    from leasecheck.targets.scratch import scratch_dir

    started, cpu = time.perf_counter(), time.process_time()
    if system_name == "lease":
        from leasecheck.conformance import replay_lease

        with scratch_dir() as directory:
            report = replay_lease(load_worker(), system, result, directory / "q.db")
    else:
        from leasecheck.job_conformance import replay_jobs

        report = replay_jobs(load_jobs_target(), system, result)
    return {
        "replay_failure": report.failure, "replayed_states": report.states,
        "replayed_transitions": report.transitions,
        "replay_seconds": time.perf_counter() - started,
        "replay_cpu_seconds": time.process_time() - cpu,
    }  # fmt: skip


def import_from(tree: str) -> None:
    """Make ``import leasecheck`` load ``tree``'s copy. An editable install's finder sits
    before the path finder on ``sys.meta_path`` and would load this checkout's whatever
    ``sys.path`` says (both sides would then measure the same code): drop it."""
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not getattr(f, "__module__", "").startswith("__editable__")]  # fmt: skip
    sys.path.insert(0, tree)
    if not (Path(tree) / "leasecheck" / "models").exists():  # before the one namespace
        import importlib

        for name in ("models", "targets"):
            sys.modules[f"leasecheck.{name}"] = importlib.import_module(name)
    import leasecheck.models  # noqa: F401

    loaded = Path(str(sys.modules["leasecheck.models"].__file__)).resolve().parents[1]
    if loaded != Path(tree).resolve():
        raise SystemExit(f"leasecheck.models was imported from {loaded}, not from {tree}")


if __name__ == "__main__":
    tree, system_name, scope_json, mode = sys.argv[1:5]
    import_from(tree)
    print(json.dumps(main(system_name, scope_json, mode)))
