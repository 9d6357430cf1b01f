# ruff: noqa: RUF001 -- the quotes keep the en dashes of the specs, word for word
"""The traceability table: every clause of both specs, what checks it, what breaks it.

Each ``Clause`` quotes a sentence or clause of ``docs/lease-worker.md`` (ids ``W…``) or
``docs/job-queue.md`` (ids ``J…``) word for word (line breaks aside), names the
properties that check it, and the public mutants (``leasecheck/mutants/``) that break
it, each caught by one of those properties. A clause the spec leaves open is an *open
reading*: a property must accept every reading, so it has no mutant. A clause about
the suite's own parts (the receiving server, the given types of ``queue_impl/jobs.py``)
is checked by leasecheck's own tests (``tests``); no target can break it.

``python -m leasecheck.spec_coverage`` writes ``docs/spec-coverage.md`` from this
table; ``tests/test_spec_coverage.py`` fails when that page is stale, when a quote is
not in its spec, when a clause has no check, or when a clause that a target can break
has no mutant in the catalogue caught by one of its properties (the kill table,
``tests/test_mutant_catalogue.py``, checks that each mutant really is caught).
Anchor: SQLite's requirement marks, each with evidence in its tests.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from leasecheck.mutants import CATALOGUE

__all__ = ["CLAUSES", "Clause", "Totals", "main", "render", "totals"]

ROOT = Path(__file__).resolve().parent.parent
SPECS = {"W": ROOT / "docs" / "lease-worker.md", "J": ROOT / "docs" / "job-queue.md"}
PAGE = ROOT / "docs" / "spec-coverage.md"


@dataclass(frozen=True)
class Clause:
    """One clause of a spec, quoted, with its checks."""

    id: str
    quote: str
    properties: tuple[str, ...]
    mutants: tuple[str, ...] = ()
    open_reading: bool = False
    """The spec leaves it open: every reading is accepted, no mutant can break it."""
    tests: tuple[str, ...] = ()
    """The suite's own part (receiver, given types): leasecheck's tests check it."""
    note: str = ""

    @property
    def spec(self) -> Path:
        return SPECS[self.id[0]]

    @property
    def needs_mutant(self) -> bool:
        return not self.open_reading and not self.tests


def _c(id: str, quote: str, properties: str, *mutants: str, note: str = "") -> Clause:
    return Clause(id, quote, tuple(properties.split()), tuple(mutants), note=note)


def _open(id: str, quote: str, properties: str, note: str) -> Clause:
    return Clause(id, quote, tuple(properties.split()), open_reading=True, note=note)


def _suite(id: str, quote: str, properties: str, tests: str) -> Clause:
    return Clause(id, quote, tuple(properties.split()), tests=tuple(tests.split()))


AG = "lease.agreement"
CFG = "lease.configuration"
EDG = "lease.edges"
JAG = "jobs.agreement"
JED = "jobs.edges"
JMC = "jobs.model-check"
LMC = "lease.model-check"

WORKER: tuple[Clause, ...] = (
    _c("W0.1", "the suite must be able to check any target file, not only ours.",
       f"{AG} {CFG} lease.crash-points", "stale-finish-accepted",
       note="every mutant is checked as a user's target file"),
    # Data
    _c("W1.1", "One SQLite file, two tables, created exactly as below (`CREATE TABLE IF NOT "
       "EXISTS`):", CFG, "schema-without-unique-id"),
    _c("W1.2", "id TEXT NOT NULL UNIQUE, qty INTEGER NOT NULL,", CFG, "schema-without-unique-id"),
    _c("W1.3", "id TEXT NOT NULL, token INTEGER NOT NULL, at_ms INTEGER NOT NULL, note TEXT NOT "
       "NULL);", f"{CFG} {AG}", "redrives-note-nullable"),
    # Value rules
    _c("W2.1", "*identifier*: `type(x) is str`, 1–64 chars of ASCII letters, digits, `_`, `-`.",
       f"{AG} {EDG}", "identifier-trailing-newline", "str-subclass-identifier",
       "identifier-allows-at-sign"),
    _c("W2.2", "*exact int*: `type(x) is int` (bool is rejected everywhere).", f"{AG} {EDG}",
       "bool-accepted-as-int", "int-subclass-accepted"),
    _c("W2.3", "`now_ms` and every clock value: exact int in `0 .. 10**15 - 60000`.", f"{AG} {EDG}",
       "clock-top-refused"),
    _c("W2.4", "A format or range error is a `ValueError` raised **before anything changes**;",
       AG, "redrive-validates-note-late", "jitter-checked-after-claim"),
    _c("W2.5", "inputs (dicts) are never modified.", AG, "ticket-mutated"),
    _c("W2.6", "The seed prints `1–1015` for token and lease_until: it means `1 .. 10**15`.",
       f"{AG} {EDG}", "ticket-token-top-refused", "ticket-lease-until-top-refused"),
    # Transactions
    _c("W3.1", "The connection arrives with no open transaction and is not closed by the "
       "function.", f"{CFG} {AG}", "run-once-closes-when-idle"),
    _c("W3.2", "Read-then-write is one `BEGIN IMMEDIATE` transaction.",
       "lease.schedules lease.single-winner lease.linearizable lease.interleavings",
       "deferred-begin", "claim-selects-outside-lock", "enqueue-check-before-begin",
       "enqueue-begins-deferred", "finish-checks-then-commits-before-update",
       "redrive-checks-dead-before-begin", "ticket-read-after-commit"),
    _c("W3.3", "On any error before `COMMIT`: roll back everything and re-raise the original "
       "error.", f"{AG} lease.crash-points", "error-replaced-on-rollback",
       "audit-row-without-state-change", "finish-two-transactions"),
    _c("W3.4", "An error after `COMMIT` leaves the committed state.", "lease.crash-points",
       "claim-commit-hook-before-commit"),
    _c("W3.5", "Whatever happens, no transaction is left open.", f"{AG} {EDG}",
       "no-rollback-on-error", "rollback-on-exception-only"),
    _c("W3.6", "`fault` is `None` (never called) or a callable taking the point name.",
       f"{AG} {CFG}", "hook-point-renamed", "fault-skipped-when-falsy"),
    _c("W3.7", "Hooks are called only on the path that changed something; no hook on a "
       "no-change return (`None`, `False`).", AG, "hook-on-stale-finish"),
    # Functions
    _c("W4.1", "**Exceptions**: `Conflict`, `Retryable`, `Permanent`, `BadAck`, all subclasses "
       "of `Exception`.", f"{AG} {CFG}", "enqueue-conflict-not-raised", "truthy-ack-accepted",
       note="a missing or misnamed class is refused by the loader (exit 2)"),
    _c("W5.1", "attempt 1–16, base_ms 1–60000, cap_ms base_ms–60000, jitter int or float (not "
       "bool), finite, 0–1.", f"{AG} {EDG}", "cap-below-base-accepted",
       "jitter-isfinite-before-range"),
    _c("W5.2", "Returns `floor(min(cap_ms, base_ms * 2**(attempt-1)) * jitter)`: cap first, "
       "then jitter, then floor.", f"{AG} {EDG}", "jitter-before-cap",
       "retry-delay-exponent-clamped", "retry-delay-epsilon-before-floor"),
    _c("W5.3", "No randomness, no sleep.", AG, "retry-delay-random"),
    _c("W6.1", "`sqlite3.connect(path, isolation_level=None, timeout=1)`", CFG,
       "implicit-transactions", "busy-timeout-zero", "busy-timeout-five"),
    _c("W6.2", "`journal_mode=DELETE`, `synchronous=FULL`;", f"{CFG} lease.power-loss",
       "journal-wal", "synchronous-normal", "synchronous-off", "journal-memory", "wal-normal"),
    _c("W6.3", "creates both tables in one transaction only if absent;",
       f"{CFG} lease.crash-random", "schema-two-transactions", "open-queue-recreates-tables",
       "schema-only-when-jobs-absent"),
    _c("W6.4", "never touches existing rows;", f"{AG} lease.crash-points",
       "open-queue-wipes-rows", "open-queue-deletes-rows"),
    _c("W6.5", "closes the connection if initialisation fails.", CFG,
       "open-queue-leaks-connection"),
    _c("W6.6", "A real file, not `:memory:`.", CFG, "open-queue-accepts-memory"),
    _c("W7.1", "event is exactly a `dict` with keys `id` (identifier) and `qty` (1–1000);",
       f"{AG} {EDG}", "dict-subclass-accepted", "qty-top-refused"),
    _c("W7.2", "ttl_ms 1–60000; max_attempts 1–16.", f"{AG} {EDG} {LMC}", "ttl-top-refused",
       "budget-top-refused"),
    _c("W7.3", "New id: insert `pending, attempts=0, token=0, available_at=now_ms, "
       "deadline=now_ms+ttl_ms`, owner/lease_until/ reason NULL, return `True`.", f"{AG} {EDG}",
       "enqueue-deadline-off-by-one", "ids-looked-up-with-like"),
    _c("W7.4", "Same id and same qty: change nothing (not even the budget), return `False`.", AG,
       "budget-reset-by-duplicate-enqueue"),
    _c("W7.5", "Same id, other qty: `Conflict`.", AG, "enqueue-conflict-not-raised"),
    _c("W7.6", "One write transaction.", "lease.linearizable", "enqueue-check-before-begin"),
    _c("W8.1", "owner identifier, lease_ms 1–60000.", f"{AG} {EDG}", "lease-ms-top-refused"),
    _c("W8.2", "In one `BEGIN IMMEDIATE`:",
       "lease.single-winner lease.linearizable lease.interleavings",
       "claim-selects-outside-lock", "claim-select-before-begin",
       "claim-select-then-update-by-id"),
    _c("W8.3", "*quarantine*: every row that is `pending`, or `leased` with `lease_until <= "
       "now_ms`, and has `deadline <= now_ms` or `attempts >= max_attempts` becomes `dead`",
       "lease.model-check", "quarantine-deadline-strict", "quarantine-expired-lease-strict"),
    _c("W8.4", "with reason `deadline` (deadline missed — this wins) else `exhausted`; owner and "
       "lease_until NULL.", AG, "exhausted-wins-over-deadline"),
    _c("W8.5", "pick the lowest `seq` that is (`pending` and `available_at <= now_ms`) or "
       "(`leased` and `lease_until <= now_ms`).", AG, "claim-picks-highest-seq",
       "claim-ignores-available-at", "expiry-off-by-one-claim"),
    _c("W8.6", "None: commit the quarantine, return `None` (no hook).", f"{AG} {EDG}",
       "quarantine-lost-when-nothing-claimable"),
    _c("W8.7", "attempts+1, token+1, `leased`, owner, `lease_until = min(now_ms + lease_ms, "
       "deadline)`, reason NULL;", AG, "lease-not-capped-at-deadline"),
    _c("W8.8", "`fault('after-claim')`; COMMIT; `fault('after-commit')`.",
       f"lease.crash-points {AG}", "claim-commit-hook-before-commit", "hook-point-renamed"),
    _c("W8.9", "Returns exactly `{id, qty, owner, token, attempt, lease_until}` (attempt = new "
       "attempts).", AG, "ticket-extra-key"),
    _c("W9.1", "ticket is exactly a `dict` with the six claim keys (id/owner identifiers; qty "
       "1–1000; token 1–10**15; attempt 1–16; lease_until 1–10**15);", f"{AG} {EDG} {LMC}",
       "dict-subclass-accepted", "ticket-token-top-refused", "ticket-lease-until-top-refused",
       "ticket-attempt-top-refused"),
    _c("W9.2", "outcome `'ok' | 'retry' | 'permanent'` (exact str);", AG,
       "outcome-case-insensitive"),
    _c("W9.3", "delay_ms 0–60000.", f"{AG} {EDG}", "delay-top-refused"),
    _c("W9.4", "Returns `False` with no change if the job is missing, not `leased`, any of "
       "qty/owner/token/ attempt/lease_until differs from the row,",
       f"{AG} {EDG} lease.races lease.linearizable", "stale-finish-accepted",
       "finish-ignores-marker", "finish-checks-owner-only", "finish-ignores-attempt"),
    _c("W9.5", "or `now_ms >= lease_until`, or `now_ms >= deadline`.", "lease.model-check",
       "expiry-off-by-one-finish",
       note="lease_until <= deadline in every state the spec allows, so the deadline test is "
       "implied by the lease_until one: no mutant of it alone can be observed"),
    _c("W9.6", "Otherwise: `ok` → `done`, reason NULL; `permanent` → `dead`/`permanent`;", AG,
       "permanent-reason-exhausted"),
    _c("W9.7", "`retry` → `dead`/`exhausted` if attempts >= max_attempts (checked first), else "
       "`dead`/`deadline` if `now_ms + delay_ms >= deadline`, else `pending`/`retry`.",
       f"{AG} lease.model-check", "retry-ignores-max-attempts", "retry-at-deadline-pending"),
    _c("W9.8", "`available_at = now_ms + delay_ms` when pending, else `now_ms`.", AG,
       "retry-delay-ignored", "dead-available-at-with-delay"),
    _c("W9.9", "owner and lease_until NULL, other fields kept.", AG, "finish-keeps-owner"),
    _c("W9.10", "`fault('after-finish')`; COMMIT; `fault('after-commit')`. Returns the new "
       "status string.", f"{AG} lease.crash-points", "hook-after-commit",
       "finish-hook-after-commit"),
    _c("W10.1", "job_id and note identifiers, ttl_ms 1–60000.", f"{AG} {EDG}",
       "identifier-allows-at-sign", "redrive-validates-note-late"),
    _c("W10.2", "Missing or not `dead`: `ValueError`.", AG, "redrive-of-done-job"),
    _c("W10.3", "In one transaction, in this order: insert `(id, current token, at_ms=now_ms, "
       "note)` into `redrives`; `fault('after-audit')`;", f"{AG} lease.crash-points {CFG}",
       "audit-row-without-state-change", "redrive-audit-committed-alone",
       "redrive-resets-before-audit"),
    _c("W10.4", "set `pending, attempts=0, available_at=now_ms, deadline=now_ms+ttl_ms`, "
       "owner/lease_until/ reason NULL (qty, max_attempts and **token kept**);", AG,
       "redrive-resets-token", "redrive-bumps-token"),
    _c("W10.5", "`fault('after-redrive')`; COMMIT; `fault('after-commit')`. Returns `True`.", AG,
       "redrive-returns-none"),
    _c("W11.1", "validate jitter first;", AG, "jitter-checked-after-claim"),
    _c("W11.2", "`t1 = clock()`; claim at t1; no job → `None` (send not called).", AG,
       "claim-at-second-reading"),
    _c("W11.3", "Else call `send({'id', 'qty'})` once with a fresh dict, outside any "
       "transaction.", f"{AG} lease.duplicate-send {CFG}", "send-gets-ticket",
       "run-once-sends-twice", "send-inside-transaction"),
    _c("W11.4", "Exactly `True` → `ok`; another return value → raise `BadAck`.", f"{AG} {CFG}",
       "truthy-ack-accepted", "ack-accepts-ok-string"),
    _c("W11.5", "`Retryable` (isinstance) → `retry` with `retry_delay(attempt, 100, 1000, "
       "jitter)`;", CFG, "retryable-exact-type"),
    _c("W11.6", "`Permanent` → `permanent`.", CFG, "permanent-exact-type"),
    _c("W11.7", "Any other exception, and BadAck, propagate and leave the job leased.",
       f"{AG} {CFG}", "unexpected-error-retried", "send-oserror-retried",
       "interrupt-hands-job-back"),
    _c("W11.8", "Then `t2 = clock()`; invalid or `t2 < t1` → `ValueError`, claim kept.",
       f"{AG} {CFG}", "backwards-clock-ignored", "second-clock-read-before-send"),
    _c("W11.9", "Then `finish(ticket, outcome, t2, delay)` with the ticket from claim (whatever "
       "send did to its dict or to the DB)", CFG, "finish-with-refreshed-token"),
    _c("W11.10", "and return `{'id', 'token', 'status'}` where status is finish's result or "
       "`'stale'` when finish returned False.", AG, "stale-reported-as-false"),
    _c("W12.1", "path must be an existing regular file, else `FileNotFoundError` (never create a "
       "queue).", f"{AG} {CFG}", "run-file-creates-file", "run-file-accepts-fifo"),
    _c("W12.2", "Opens with `open_queue`, returns `run_once`'s result, closes the connection on "
       "success and on failure.", CFG, "run-file-leaks-on-success", "run-file-leaks-on-failure",
       "run-file-skips-open-queue", "run-file-closes-on-exception-only"),
    # The receiving server: the suite's own part
    _suite("W13.1", "An HTTP server on `127.0.0.1`, ephemeral port, that records each delivery "
           "`{id, qty}` in its own SQLite inbox and applies its effect (e.g. adds qty to a "
           "ledger) in one transaction, once per id:", "lease.duplicate-send",
           "tests/test_receiver.py"),
    _suite("W13.2", "the same id and qty again is acknowledged without a second effect;",
           "lease.duplicate-send", "tests/test_receiver.py"),
    _suite("W13.3", "the same id with another qty is refused (409); malformed requests get a 4xx "
           "and change nothing.", "lease.duplicate-send", "tests/test_receiver.py"),
    _suite("W13.4", "Its `send` client returns `True` on acknowledgement, raises `Retryable` on "
           "timeout, connection error or 5xx and `Permanent` on a refusal.",
           "lease.duplicate-send", "tests/test_receiver.py"),
    _c("W13.5", "two HTTP requests arrive, one inbox row and one effect exist, the job ends "
       "`done` with token 2.", "lease.duplicate-send", "run-once-sends-twice"),
    _suite("W13.6", "Nothing claims exactly-once delivery; the receiver deduplicates.",
           "lease.duplicate-send", "tests/test_receiver.py"),
    # Left open
    _open("W14.1", "The order in which several invalid arguments are reported;", AG,
          "one argument is made bad per call, so no order is ever judged"),
    _open("W14.2", "what `fault` that is not callable does;", AG,
          "never generated: fault is None or a callable"),
    _open("W14.3", "whether `run_file` checks the path or jitter first;", AG,
          "a bad path with a bad jitter accepts FileNotFoundError or ValueError"),
    _open("W14.4", "whether the second clock is read after a BadAck;", AG,
          "the scripted clock repeats its last reading, so either count is accepted"),
    _open("W14.5", "behaviour past token 10**15.", AG,
          "start states stop at 10**15 - 1 and a job at the top token is never redriven"),
)  # fmt: skip

JOBS: tuple[Clause, ...] = (
    _suite("J1.1", "`JobStatus` — `enum.Enum` with members `PENDING, RUNNING, SUCCEEDED, DEAD, "
           "CANCELLED`.", JAG, "tests/test_jobs.py"),
    _suite("J1.2", "`RetryPolicy(max_attempts, base_backoff_millis, max_backoff_millis)` — "
           "frozen; validates itself: exact ints, `max_attempts >= 1`, `base_backoff_millis >= "
           "1`, `max_backoff_millis >= base_backoff_millis`, else `ValueError`.", JAG,
           "tests/test_jobs.py"),
    _suite("J1.3", "`Lease(job_id, token, type, payload, attempt, lease_until)` and", JAG,
           "tests/test_jobs.py"),
    _suite("J1.4", "`TimeSource` — a `typing.Protocol` with `now_millis() -> int`.", JAG,
           "tests/test_jobs.py"),
    _suite("J1.5", "`IllegalStateError(RuntimeError)` — the seed's IllegalStateException.", JAG,
           "tests/test_jobs.py"),
    _c("J1.6", "IllegalArgumentException → `ValueError`; NoSuchElementException → `KeyError`; "
       "IllegalStateException → `IllegalStateError`;", JAG, "jobs-unknown-id-value-error"),
    _c("J2.1", 'new PENDING job, ids `"J1"`, `"J2"`, …;', JAG, "jobs-ids-from-zero",
       "jobs-table-shared-between-queues"),
    _c("J2.2", "blank `type` (None, empty, whitespace) → `ValueError`;", f"{JAG} {JED}",
       "jobs-whitespace-type-accepted", "jobs-blank-means-ascii"),
    _c("J2.3", '`payload=None` is stored as `""`', JAG, "jobs-payload-none-not-stored-empty"),
    _c("J2.4", "best ready job (PENDING and `run_at <= now`) → RUNNING, attempts+1, "
       "`lease_until = now + lease_millis`, a new unique token;", f"jobs.model-check {JED}",
       "jobs-ready-boundary", "jobs-lease-capped-at-12-hours"),
    _c("J2.5", "blank worker or `lease_millis <= 0` → `ValueError`", f"{JAG} {JED}",
       "jobs-zero-lease-accepted"),
    _c("J2.6", 'records `last_error` (`None` → `"failed"`), then retry or dead-letter',
       f"{JAG} {JED}", "jobs-fail-none-error-not-recorded", "jobs-empty-error-is-default",
       "jobs-error-truncated"),
    _c("J2.7", "current state; `next_run_at` is the job's run-at", JAG,
       "jobs-view-next-run-at-lease"),
    _c("J2.8", "all DEAD jobs in submission order", f"{JAG} {JED} jobs.interleavings",
       "jobs-dead-letters-newest-first", "jobs-dead-letters-sorted-by-id",
       "jobs-dead-letters-shared-list", "jobs-dead-letters-viewed-unlocked"),
    _c("J2.9", "only from DEAD: PENDING, attempts 0, ready now (`run_at = now`)", JAG,
       "jobs-retry-dead-keeps-attempts", "jobs-retry-dead-of-pending"),
    _c("J2.10", "only from PENDING → CANCELLED", JAG, "jobs-cancel-running"),
    _c("J2.11", "Unknown id → `KeyError`.", f"{JAG} {JED}", "jobs-unknown-id-value-error",
       "jobs-id-parsed-as-int"),
    _c("J2.12", "`retry_dead`/`cancel` in the wrong state → `IllegalStateError`.", JAG,
       "jobs-cancel-running", "jobs-retry-dead-of-pending"),
    _c("J3.1", "**Best job**: highest priority, then earliest run-at, then submission order.",
       f"{JAG} {JED} {JMC}", "jobs-priority-reversed", "jobs-run-at-tie-break-ignored",
       "jobs-submission-order-ignored", "jobs-ids-compared-as-strings",
       "jobs-poll-window-of-eight", "jobs-best-job-by-one-score",
       "jobs-order-lost-after-32-cancels"),
    _c("J3.2", "**Tokens**: every successful poll makes a token never issued before (by this "
       "queue).", f"{JAG} {JED}", "jobs-token-reuse-after-retry-dead",
       "jobs-tokens-random-20-bits"),
    _c("J3.3", "`complete` and `fail` work only with the token of the job's current lease while "
       "it is RUNNING; anything else → `IllegalStateError` (this stops a zombie worker).",
       f"{JAG} {JED}", "jobs-stale-token-accepted", "jobs-token-compared-by-identity"),
    _c("J3.4", "**Expiry**: a lease is valid while `now < lease_until`.",
       f"{JAG} jobs.model-check", "jobs-expiry-boundary", "jobs-expiry-one-early"),
    _c("J3.5", 'An expired lease counts as a failed attempt with error `"lease expired"`, as if '
       "`fail` had been called at the instant `lease_until` (so its backoff counts from "
       "`lease_until`, not from now).", JAG, "jobs-expiry-anchor-now", "jobs-expiry-error-text"),
    _c("J3.6", "Expired leases are processed at the start of every `poll`, `complete` and "
       "`fail`, before their own work;", f"{JAG} {JED} {JMC}", "jobs-complete-skips-expiry",
       "jobs-expiry-batch-of-16", "jobs-token-checked-before-expiry",
       note="whether a complete or fail that then raises keeps the processing is taken as "
       "open: the model follows the reading the target shows first, and a queue that shows "
       "both is VIOLATED at the call"),
    _c("J3.7", "the other methods do not process them.", JAG, "jobs-expiry-in-view",
       "jobs-cancel-refusal-expires"),
    _c("J3.8", "**Retry or dead-letter**: after a failed attempt, if `attempts < max_attempts` "
       "the job is PENDING with `run_at = failure_time + backoff`,", f"{JAG} {JMC}",
       "jobs-max-attempts-off-by-one", "jobs-attempts-capped-at-five"),
    _c("J3.9", "where after the n-th attempt `backoff = min(max_backoff, base_backoff * "
       "2**(n-1))`; otherwise DEAD.", f"{JAG} {JED} {JMC}", "jobs-backoff-uncapped",
       "jobs-backoff-exponent-off-by-one", "jobs-backoff-stops-doubling",
       "jobs-backoff-table-of-three", "jobs-cap-as-last-doubling",
       "jobs-backoff-exponent-clamped", "jobs-backoff-by-float-pow"),
    _c("J3.10", "**Exactly one worker**: with many threads polling at once, a job is never "
       "leased to two workers at the same time;", "jobs.threads jobs.interleavings",
       "jobs-unlocked-poll", "jobs-poll-picks-outside-lock", "jobs-token-read-before-lock",
       "jobs-lease-built-after-unlock", "jobs-retry-dead-own-lock"),
    _c("J3.11", "all methods are safe to call from many threads.",
       "jobs.linearizable jobs.interleavings", "jobs-poll-two-critical-sections",
       "jobs-complete-check-then-act", "jobs-fail-check-then-act", "jobs-cancel-check-then-act",
       "jobs-retry-dead-check-then-act", "jobs-submit-id-outside-lock",
       "jobs-view-without-lock", "jobs-dead-letters-without-lock"),
    _open("J4.1", "Token type and values (only uniqueness and equality count);", JAG,
          "target tokens are mapped to model tokens through a bijection"),
    _open("J4.2", "whether `retry_dead` clears `last_error`;", JAG,
          "learnt from the target at its first retry_dead"),
    _open("J4.3", "`priority` and `run_at_millis` given as bool or non-int;", JAG,
          "never generated"),
    _open("J4.4", "`type`, `payload`, `worker_id` or `error` given as something other than "
          "`str`/`None`;", JAG, "never generated"),
    _open("J4.5", "`lease_millis` that is not an int.", JAG, "never generated"),
)  # fmt: skip

CLAUSES: tuple[Clause, ...] = WORKER + JOBS


def squeeze(text: str) -> str:
    """Whitespace collapsed: a quote matches its spec across line breaks."""
    return re.sub(r"\s+", " ", text).strip()


@dataclass(frozen=True)
class Totals:
    clauses: int
    checked: int
    open_readings: int
    suite_parts: int
    breakable: int
    """Clauses a target can break (neither open nor the suite's own part)."""
    with_mutant: int
    mutants: int
    """Distinct catalogue mutants named by the table."""
    killed: int
    """Of those, the ones whose ``caught_by`` is a property of a clause that names them."""


def _caught(clause: Clause) -> list[str]:
    by_name = {m.name: m for m in CATALOGUE}
    return [n for n in clause.mutants if n in by_name and by_name[n].caught_by in clause.properties]


def totals(clauses: Iterable[Clause] = CLAUSES) -> Totals:
    chosen = list(clauses)
    named = {n for c in chosen for n in c.mutants}
    killed = {n for c in chosen for n in _caught(c)}
    breakable = [c for c in chosen if c.needs_mutant]
    return Totals(
        clauses=len(chosen),
        checked=sum(1 for c in chosen if c.properties),
        open_readings=sum(1 for c in chosen if c.open_reading),
        suite_parts=sum(1 for c in chosen if c.tests),
        breakable=len(breakable),
        with_mutant=sum(1 for c in breakable if _caught(c)),
        mutants=len(named),
        killed=len(killed),
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _killed_by(clause: Clause) -> str:
    if clause.open_reading:
        return f"open reading: {clause.note}"
    if clause.tests:
        return "suite's own part: " + ", ".join(f"`{t}`" for t in clause.tests)
    by_name = {m.name: m for m in CATALOGUE}
    parts = [
        f"`{n}` ({by_name[n].caught_by})" if n in by_name else f"`{n}` (NOT IN THE CATALOGUE)"
        for n in clause.mutants
    ]
    return "; ".join(parts) + (f". {clause.note}" if clause.note else "")


def render(clauses: Iterable[Clause] = CLAUSES) -> str:
    """docs/spec-coverage.md."""
    chosen = list(clauses)
    t = totals(chosen)
    lines = [
        "# Spec coverage: every clause, the properties that check it, the mutants that break it",
        "",
        "Generated by `python -m leasecheck.spec_coverage` from `leasecheck/spec_coverage.py`;",
        "do not edit by hand (`tests/test_spec_coverage.py` fails when this page is stale).",
        "Each clause is quoted word for word from [lease-worker.md](lease-worker.md) (`W`) or",
        "[job-queue.md](job-queue.md) (`J`). A mutant is a public catalogue entry",
        "(`leasecheck mutants --list`); the kill table (`tests/test_mutant_catalogue.py`)",
        "checks that the property in brackets catches it (ci profile, seed 0).",
        "",
        f"- clauses: {t.clauses} ({t.checked} checked by a property)",
        f"- open readings (every reading accepted): {t.open_readings}",
        f"- the suite's own parts (receiver, given types; checked by its tests): {t.suite_parts}",
        f"- clauses a target can break: {t.breakable}, each with a killed mutant: {t.with_mutant}",
        f"- mutants named: {t.mutants}, caught by a property of their clause: {t.killed}",
        "",
    ]
    for prefix, title in (("W", "The lease worker"), ("J", "The job queue")):
        lines += [f"## {title}", "", "| id | clause | checked by | broken by (caught by) |"]
        lines.append("|---|---|---|---|")
        for clause in (c for c in chosen if c.id.startswith(prefix)):
            checks = ", ".join(f"`{p}`" for p in clause.properties)
            lines.append(
                f"| {clause.id} | {_cell(clause.quote)} | {checks} | {_cell(_killed_by(clause))} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write docs/spec-coverage.md")
    parser.add_argument("--output", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    args.output.write_text(render())
    t = totals()
    print(
        f"{args.output}: {t.clauses} clauses, {t.with_mutant}/{t.breakable} breakable with a "
        f"killed mutant, {t.open_readings} open readings, {t.killed}/{t.mutants} mutants"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
