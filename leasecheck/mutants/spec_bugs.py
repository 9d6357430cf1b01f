"""Planted bugs written from the spec-coverage table (docs/spec-coverage.md).

One mutant per sentence of lease-worker.md or job-queue.md that no earlier mutant
broke alone: the configuration and resource sentences of ``open_queue``/``run_file``,
``send``'s side of ``run_once``, exact types, both ends of every range, and the
JobQueue's scope. Each is a small edit of a bundled file, breaks that sentence and
nothing the spec leaves open, and names the property that kills it.
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]

_CONNECT = "con = sqlite3.connect(path, isolation_level=None, timeout=1)"
_CREATE = (
    "        with _transaction(con):\n"
    "            con.execute(JOBS_TABLE)\n"
    "            con.execute(REDRIVES_TABLE)\n"
)
_DELIVER_EXCEPT = (
    "    except Retryable:\n"
    '        return "retry", retry_delay(ticket["attempt"], 100, 1000, jitter)\n'
    "    except Permanent:\n"
    '        return "permanent", 0\n'
)


def _config(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "worker", bug_class, real_world, "lease.configuration", tuple(edits))


CONFIGURATION: tuple[Mutant, ...] = (
    _config(
        "journal-wal",
        "open_queue switches the file to journal_mode=WAL (the spec says DELETE)",
        "'use WAL for concurrency' applied to a queue whose readers open the file with "
        "tools that expect a rollback journal",
        (
            '        con.execute("PRAGMA journal_mode=DELETE")\n',
            '        con.execute("PRAGMA journal_mode=WAL")\n',
        ),
    ),
    _config(
        "synchronous-normal",
        "open_queue sets synchronous=NORMAL (the spec says FULL)",
        "a speed tip applied to every SQLite connection of a service",
        (
            '        con.execute("PRAGMA synchronous=FULL")\n',
            '        con.execute("PRAGMA synchronous=NORMAL")\n',
        ),
    ),
    _config(
        "busy-timeout-zero",
        "open_queue connects with timeout=0: a writer blocked by another process fails at once",
        "a worker that crashes with 'database is locked' whenever a second worker commits",
        (_CONNECT, "con = sqlite3.connect(path, isolation_level=None, timeout=0)"),
    ),
    _config(
        "busy-timeout-five",
        "open_queue connects with timeout=5: a blocked writer hangs five seconds, not one",
        "Python's default-looking timeout=5.0 copied from the sqlite3 documentation",
        (_CONNECT, "con = sqlite3.connect(path, isolation_level=None, timeout=5)"),
    ),
    _config(
        "implicit-transactions",
        "open_queue keeps sqlite3's default isolation_level, so Python opens transactions itself",
        "a connection made with sqlite3.connect(path) and legacy implicit BEGINs",
        (_CONNECT, "con = sqlite3.connect(path, timeout=1)"),
    ),
    _config(
        "schema-two-transactions",
        "open_queue creates the two tables in autocommit mode, one transaction each",
        "a migration script that runs its CREATE statements one by one, so a crash between "
        "them leaves half a schema",
        (_CREATE, "        con.execute(JOBS_TABLE)\n        con.execute(REDRIVES_TABLE)\n"),
    ),
    _config(
        "schema-only-when-jobs-absent",
        "open_queue creates the tables only when the jobs table is missing, so a file "
        "holding jobs but no redrives table never gets one",
        "an 'is the database initialised?' check that looks at one table and takes it for "
        "the whole schema",
        (
            _CREATE,
            "        present = con.execute(\n"
            "            \"SELECT 1 FROM sqlite_master WHERE type='table' AND name='jobs'\"\n"
            "        ).fetchone()\n"
            "        if present is None:\n"
            "            with _transaction(con):\n"
            "                con.execute(JOBS_TABLE)\n"
            "                con.execute(REDRIVES_TABLE)\n",
        ),
    ),
    _config(
        "schema-without-unique-id",
        "the jobs table is created without UNIQUE on id (the spec's statement has it)",
        "a hand-written schema that drops a constraint the code 'already checks'",
        (
            "  id TEXT NOT NULL UNIQUE, qty INTEGER NOT NULL,",
            "  id TEXT NOT NULL, qty INTEGER NOT NULL,",
        ),
    ),
    _config(
        "open-queue-leaks-connection",
        "open_queue does not close its connection when initialisation fails",
        "a constructor that opens a handle and raises without releasing it (fd exhaustion)",
        (
            "    except BaseException:\n        con.close()\n        raise\n    return con",
            "    except BaseException:\n        raise\n    return con",
        ),
    ),
    _config(
        "run-file-leaks-on-failure",
        "run_file closes its connection only when run_once succeeds",
        "a close() written after the call instead of in finally",
        (
            "        return run_once(con, owner, clock, send, jitter, lease_ms)\n"
            "    finally:\n        con.close()",
            "        result = run_once(con, owner, clock, send, jitter, lease_ms)\n"
            "    except BaseException:\n        raise\n    con.close()\n    return result",
        ),
    ),
    _config(
        "run-file-leaks-on-success",
        "run_file closes its connection only when run_once fails",
        "cleanup written in an except block, so the happy path keeps every handle",
        (
            "    finally:\n        con.close()",
            "    except BaseException:\n        con.close()\n        raise",
        ),
    ),
    _config(
        "run-file-accepts-fifo",
        "run_file checks that the path exists, not that it is a regular file",
        "os.path.exists used where os.path.isfile was meant: a FIFO or socket is opened",
        ("or not os.path.isfile(path):", "or not os.path.exists(path):"),
    ),
    _config(
        "open-queue-accepts-memory",
        "open_queue accepts ':memory:', a queue that vanishes with its connection",
        "a test-only in-memory database path that reaches production configuration",
        ('os.fspath(path) in ("", ":memory:")', 'os.fspath(path) in ("",)'),
    ),
    _config(
        "retryable-exact-type",
        "run_once recognises Retryable only by exact type, so a subclass propagates",
        "type(error) is RetryableError instead of isinstance, breaking client subclasses",
        (
            _DELIVER_EXCEPT,
            "    except Exception as error:\n"
            "        if type(error) is Retryable:\n"
            '            return "retry", retry_delay(ticket["attempt"], 100, 1000, jitter)\n'
            "        if isinstance(error, Permanent):\n"
            '            return "permanent", 0\n'
            "        raise\n",
        ),
    ),
    _config(
        "permanent-exact-type",
        "run_once recognises Permanent only by exact type, so a subclass propagates",
        "an error table keyed by exception class, missing the subclasses a client raises",
        (
            _DELIVER_EXCEPT,
            "    except Exception as error:\n"
            "        if isinstance(error, Retryable):\n"
            '            return "retry", retry_delay(ticket["attempt"], 100, 1000, jitter)\n'
            "        if type(error) is Permanent:\n"
            '            return "permanent", 0\n'
            "        raise\n",
        ),
    ),
    _config(
        "finish-with-refreshed-token",
        "run_once finishes with the token read back from the DB after send, not claim's ticket",
        "a worker that refreshes its lease marker before acking, so it acks a stolen job",
        (
            "    status = finish(con, ticket, outcome, t2, delay_ms)",
            "    (token,) = con.execute(\n"
            '        "SELECT token FROM jobs WHERE id = ?", (ticket["id"],)\n'
            "    ).fetchone()\n"
            '    status = finish(con, {**ticket, "token": token}, outcome, t2, delay_ms)',
        ),
    ),
)


def _agreement(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "worker", bug_class, real_world, "lease.agreement", tuple(edits))


def _edge(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "worker", bug_class, real_world, "lease.edges", tuple(edits))


EDGES: tuple[Mutant, ...] = (
    _edge(
        "int-subclass-accepted",
        "an exact int is checked with isinstance (bool excluded), so int subclasses pass",
        "an IntEnum or numpy-like int subclass slipping into a column that expects plain ints",
        (
            "    if type(value) is not int:\n        raise ValueError(\n"
            '            f"{where}: {name} must be an exact int',
            "    if not isinstance(value, int) or isinstance(value, bool):\n"
            "        raise ValueError(\n"
            '            f"{where}: {name} must be an exact int',
        ),
    ),
    _edge(
        "str-subclass-identifier",
        "an identifier is checked with isinstance(x, str), so str subclasses pass",
        "a str subclass (a markup-safe or enum string) accepted where the spec wants exactly str",
        (
            "if type(value) is not str or IDENTIFIER.fullmatch(value) is None:",
            "if not isinstance(value, str) or IDENTIFIER.fullmatch(value) is None:",
        ),
    ),
    _edge(
        "dict-subclass-accepted",
        "events and tickets are checked with isinstance(x, dict), so dict subclasses pass",
        "an OrderedDict or defaultdict accepted where the spec wants exactly a dict",
        (
            "if type(value) is not dict or set(value) != set(keys):",
            "if not isinstance(value, dict) or set(value) != set(keys):",
        ),
    ),
    _edge(
        "identifier-allows-at-sign",
        "identifiers may hold '@' (outside the spec's letters, digits, _ and -)",
        "owner names like 'worker@host' allowed by a regex widened for one deployment",
        (
            'IDENTIFIER = re.compile(r"[A-Za-z0-9_-]{1,64}")',
            'IDENTIFIER = re.compile(r"[A-Za-z0-9_@-]{1,64}")',
        ),
    ),
    _edge(
        "clock-top-refused",
        "the largest valid time, 10**15 - 60000, is refused (the range's top is off by one)",
        "a bound written as an exclusive limit where the spec's range includes its end",
        ("MAX_NOW = 10**15 - 60000", "MAX_NOW = 10**15 - 60001"),
    ),
    _edge(
        "ticket-token-top-refused",
        "finish refuses a ticket whose token is 10**15, the top of the token range",
        "a fencing-token check using < where the documented range includes its maximum",
        ('ticket["token"], 1, MAX_TOKEN)', 'ticket["token"], 1, MAX_TOKEN - 1)'),
    ),
    _edge(
        "ticket-lease-until-top-refused",
        "finish refuses a ticket whose lease_until is 10**15, which a claim at the clock's top "
        "with a 60 s lease hands out",
        "a timestamp column validated against the clock's range instead of the lease's",
        ('ticket["lease_until"], 1, MAX_TOKEN)', 'ticket["lease_until"], 1, MAX_NOW)'),
    ),
)


SENTENCES: tuple[Mutant, ...] = (
    _config(
        "redrives-note-nullable",
        "the redrives table is created with a nullable note (the spec: note TEXT NOT NULL)",
        "an audit table whose 'why' column was made optional, so audits lose their reason",
        ("at_ms INTEGER NOT NULL, note TEXT NOT NULL)", "at_ms INTEGER NOT NULL, note TEXT)"),
    ),
    _agreement(
        "redrive-validates-note-late",
        "redrive checks its note only after committing, so a bad note changes the queue",
        "validation moved after the write 'because it is only used for the audit row'",
        (
            '    _check_identifier("redrive", "note", note)\n    with _transaction(con):',
            "    with _transaction(con):",
        ),
        (
            '    _hook(fault, "after-commit")\n    return True',
            '    _hook(fault, "after-commit")\n'
            '    _check_identifier("redrive", "note", note)\n    return True',
        ),
    ),
    _agreement(
        "error-replaced-on-rollback",
        "an error before COMMIT is rolled back but re-raised as another exception",
        "a transaction helper that wraps every failure in its own DatabaseError",
        (
            '            con.execute("ROLLBACK")\n        raise\n',
            '            con.execute("ROLLBACK")\n'
            '        raise RuntimeError("transaction rolled back")\n',
        ),
    ),
    _agreement(
        "no-rollback-on-error",
        "an error before COMMIT leaves the transaction open instead of rolling it back",
        "a try/except that re-raises without ROLLBACK: the next call finds a transaction open",
        (
            '        if con.in_transaction:\n            con.execute("ROLLBACK")\n        raise\n',
            "        raise\n",
        ),
    ),
    _agreement(
        "hook-point-renamed",
        "the fault hook is called with another point name ('after_claim')",
        "hook names changed in a refactoring while tests kept the old spelling",
        ('_hook(fault, "after-claim")', '_hook(fault, "after_claim")'),
    ),
    _agreement(
        "hook-on-stale-finish",
        "finish calls the after-finish hook on a stale ticket, a path that changed nothing",
        "a metrics or audit callback fired on every call, including the no-op ones",
        (
            "            return False  # stale or unknown ticket: no change, no hook",
            '            _hook(fault, "after-finish")\n            return False',
        ),
    ),
    _edge(
        "cap-below-base-accepted",
        "retry_delay accepts a cap_ms below base_ms (the spec: cap_ms base_ms..60000)",
        "a range check with a hard-coded floor of 1 instead of the other argument",
        (
            '_check_int("retry_delay", "cap_ms", cap_ms, base_ms, 60000)',
            '_check_int("retry_delay", "cap_ms", cap_ms, 1, 60000)',
        ),
    ),
    _agreement(
        "retry-delay-random",
        "retry_delay multiplies in its own randomness (the spec: no randomness)",
        "'full jitter' added inside the function although the caller passes the jitter",
        ("import re\n", "import random\nimport re\n"),
        (
            "    return math.floor(capped * jitter)",
            "    return math.floor(capped * jitter * random.uniform(0.5, 1.0))",
        ),
    ),
    _edge(
        "qty-top-refused",
        "enqueue refuses qty 1000, the top of the range",
        "an exclusive upper bound where the spec's range includes its end",
        (
            'event["qty"], 1, 1000)\n\n\ndef _check_ticket',
            'event["qty"], 1, 999)\n\n\ndef _check_ticket',
        ),
    ),
    _edge(
        "ttl-top-refused",
        "enqueue refuses ttl_ms 60000, the top of the range",
        "a limit of 'under a minute' where the spec allows exactly one minute",
        (
            '_check_int("enqueue", "ttl_ms", ttl_ms, 1, 60000)',
            '_check_int("enqueue", "ttl_ms", ttl_ms, 1, 59999)',
        ),
    ),
    _agreement(
        "enqueue-deadline-off-by-one",
        "a new job's deadline is now_ms + ttl_ms - 1",
        "a TTL converted to an inclusive last-valid instant, one millisecond short",
        (
            "(job_id, qty, max_attempts, now_ms, now_ms + ttl_ms)",
            "(job_id, qty, max_attempts, now_ms, now_ms + ttl_ms - 1)",
        ),
    ),
    _edge(
        "lease-ms-top-refused",
        "claim refuses lease_ms 60000, the top of the range",
        "an exclusive upper bound on the visibility timeout",
        (
            '_check_int("claim", "lease_ms", lease_ms, 1, 60000)',
            '_check_int("claim", "lease_ms", lease_ms, 1, 59999)',
        ),
    ),
    _agreement(
        "ticket-extra-key",
        "claim returns a ticket with an extra key (status), not exactly the six",
        "a ticket that grew a convenience field its consumers then rely on",
        (
            '        "lease_until": lease_until,\n    }',
            '        "lease_until": lease_until,\n        "status": "leased",\n    }',
        ),
    ),
    _agreement(
        "outcome-case-insensitive",
        "finish accepts 'OK' or 'Retry': the outcome is lower-cased before the check",
        "a lenient parser that normalises case where the spec wants the exact str",
        (
            "if type(outcome) is not str or outcome not in OUTCOMES:",
            "if type(outcome) is not str or outcome.lower() not in OUTCOMES:",
        ),
        ('    if outcome == "ok":', '    outcome = outcome.lower()\n    if outcome == "ok":'),
    ),
    _edge(
        "delay-top-refused",
        "finish refuses delay_ms 60000, the top of the range",
        "an exclusive upper bound on a retry delay",
        (
            '_check_int("finish", "delay_ms", delay_ms, 0, 60000)',
            '_check_int("finish", "delay_ms", delay_ms, 0, 59999)',
        ),
    ),
    _agreement(
        "permanent-reason-exhausted",
        "finish(permanent) records reason 'exhausted' instead of 'permanent'",
        "one dead-letter reason used for every way a job dies, hiding poison messages",
        ('        return "dead", "permanent"', '        return "dead", "exhausted"'),
    ),
    _agreement(
        "dead-available-at-with-delay",
        "a finish that ends the job still sets available_at = now_ms + delay_ms",
        "the retry's delay applied before deciding whether there is a retry at all",
        (
            'available_at = now_ms + delay_ms if status == "pending" else now_ms',
            "available_at = now_ms + delay_ms",
        ),
    ),
    _agreement(
        "finish-keeps-owner",
        "finish leaves the owner set (only lease_until is cleared)",
        "a release that forgets one column of the lease marker",
        (
            'FINISH = """UPDATE jobs SET status = ?, reason = ?, available_at = ?,\n'
            '  owner = NULL, lease_until = NULL WHERE seq = ?"""',
            'FINISH = """UPDATE jobs SET status = ?, reason = ?, available_at = ?,\n'
            '  lease_until = NULL WHERE seq = ?"""',
        ),
    ),
    _agreement(
        "redrive-returns-none",
        "redrive returns None instead of True",
        "a function whose success value was dropped in a refactoring",
        (
            '        _hook(fault, "after-redrive")\n'
            '    _hook(fault, "after-commit")\n    return True',
            '        _hook(fault, "after-redrive")\n'
            '    _hook(fault, "after-commit")\n    return None',
        ),
    ),
    _agreement(
        "jitter-checked-after-claim",
        "run_once validates jitter only after claiming, so a bad jitter leaves a claim behind",
        "argument checks moved next to their first use, after a side effect",
        ('    _check_jitter("run_once", jitter)\n', ""),
        (
            "    if ticket is None:\n        return None\n    outcome, delay_ms",
            "    if ticket is None:\n        return None\n"
            '    _check_jitter("run_once", jitter)\n    outcome, delay_ms',
        ),
    ),
    _agreement(
        "claim-at-second-reading",
        "run_once reads the clock again for its claim instead of claiming at t1",
        "two calls to time.time() where one reading was meant to be shared",
        (
            "    ticket = claim(con, owner, t1, lease_ms)",
            '    ticket = claim(con, owner, _read_clock(clock, "first"), lease_ms)',
        ),
    ),
    _agreement(
        "send-gets-ticket",
        "run_once passes send the whole ticket instead of a fresh {id, qty} dict",
        "the lease marker leaked to a third-party client, which may change or log it",
        ('result = send({"id": ticket["id"], "qty": ticket["qty"]})', "result = send(ticket)"),
    ),
    _agreement(
        "unexpected-error-retried",
        "run_once turns any other exception from send into a retry instead of propagating it",
        "a catch-all except that schedules a retry for programming errors too",
        (
            '    except Permanent:\n        return "permanent", 0\n',
            '    except Permanent:\n        return "permanent", 0\n'
            '    except RuntimeError:\n        return "retry", 0\n',
        ),
    ),
    _agreement(
        "stale-reported-as-false",
        "run_once returns status False instead of 'stale' when finish refused the ticket",
        "a raw return value passed through where the API promises a status string",
        ('"status": "stale" if status is False else status,', '"status": status,'),
    ),
    _config(
        "run-once-closes-when-idle",
        "run_once closes the caller's connection when there is no job",
        "a worker loop helper that 'cleans up' a connection it does not own",
        (
            "    if ticket is None:\n        return None\n    outcome, delay_ms",
            "    if ticket is None:\n        con.close()\n"
            "        return None\n    outcome, delay_ms",
        ),
    ),
)


def _jobs(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "jobs", bug_class, real_world, "jobs.agreement", tuple(edits))


def _job_edge(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "jobs", bug_class, real_world, "jobs.edges", tuple(edits))


JOB_SENTENCES: tuple[Mutant, ...] = (
    _jobs(
        "jobs-ids-from-zero",
        "job ids start at J0 instead of J1",
        "a zero-based counter formatted into ids that the contract numbers from one",
        ('job = _Job(f"J{seq}", seq,', 'job = _Job(f"J{seq - 1}", seq,'),
    ),
    _job_edge(
        "jobs-dead-letters-sorted-by-id",
        "dead_letters() sorts by id string, so J10 comes before J2 (not submission order)",
        "sorting on the id column of a table whose ids are not zero-padded",
        (
            "            return [job.view() for job in self._jobs.values()"
            " if job.status is JobStatus.DEAD]",
            "            dead = [job for job in self._jobs.values()"
            " if job.status is JobStatus.DEAD]\n"
            "            return [job.view() for job in sorted(dead, key=lambda j: j.id)]",
        ),
    ),
    _job_edge(
        "jobs-empty-error-is-default",
        "fail records an empty error string as 'failed' (the spec: only None becomes 'failed')",
        "'error or DEFAULT' where 'DEFAULT if error is None else error' was meant",
        (
            "DEFAULT_ERROR if message is None else message",
            "message or DEFAULT_ERROR",
        ),
    ),
    _job_edge(
        "jobs-zero-lease-accepted",
        "poll accepts lease_millis 0 (the spec: lease_millis <= 0 is a ValueError)",
        "a >= 0 check where a positive duration was required, leasing jobs already expired",
        ("        if lease_for <= 0:", "        if lease_for < 0:"),
    ),
    _jobs(
        "jobs-unknown-id-value-error",
        "an unknown job id raises ValueError instead of KeyError",
        "IllegalArgumentException mapped to the wrong Python exception in a port from Java",
        (
            '            raise KeyError(f"no job with id',
            '            raise ValueError(f"no job with id',
        ),
    ),
    _jobs(
        "jobs-retry-dead-of-pending",
        "retry_dead accepts a PENDING job (the spec: only from DEAD)",
        "a 'retry' admin button that also resets the attempts of jobs still waiting",
        (
            "            if job.status is not JobStatus.DEAD:\n"
            "                raise IllegalStateError(",
            "            if job.status not in (JobStatus.DEAD, JobStatus.PENDING):\n"
            "                raise IllegalStateError(",
        ),
    ),
    _jobs(
        "jobs-expiry-error-text",
        "an expired lease is recorded with the error 'lease timeout', not 'lease expired'",
        "an error string reworded in one place while the contract fixes its text",
        ('LEASE_EXPIRED = "lease expired"', 'LEASE_EXPIRED = "lease timeout"'),
    ),
    _job_edge(
        "jobs-backoff-stops-doubling",
        "backoff doubles only once: after the 3rd attempt it stays base * 2",
        "a backoff table with two entries, reused for every later attempt",
        (
            "        doubled: int = self._policy.base_backoff_millis * 2 ** (attempts - 1)",
            "        doubled: int = self._policy.base_backoff_millis * 2 ** min(attempts - 1, 1)",
        ),
    ),
    _jobs(
        "jobs-view-next-run-at-lease",
        "view reports lease_until as next_run_at while the job is RUNNING",
        "a 'next event' column reused for the lease deadline in the running state",
        (
            "            self.id, self.type, self.priority, self.status, self.attempts,"
            " self.run_at,",
            "            self.id, self.type, self.priority, self.status, self.attempts,\n"
            "            self.lease_until if self.status is JobStatus.RUNNING else self.run_at,",
        ),
    ),
)


def _job_scope(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "jobs", bug_class, real_world, "jobs.model-check", tuple(edits))


_BACKOFF = (
    "        doubled: int = self._policy.base_backoff_millis * 2 ** (attempts - 1)\n"
    "        return min(self._policy.max_backoff_millis, doubled)\n"
)

JOB_SCOPE: tuple[Mutant, ...] = (
    _job_scope(
        "jobs-ids-compared-as-strings",
        "poll breaks ties by the id string, not submission order: J10 comes before J3",
        "a queue ordered by its text id column, fine until the tenth job",
        (
            "            job = min(ready, key=lambda j: (-j.priority, j.run_at, j.seq))",
            "            job = min(ready, key=lambda j: (-j.priority, j.run_at, j.id))",
        ),
    ),
    _job_scope(
        "jobs-poll-window-of-eight",
        "poll chooses the best job among the first eight ready ones only (submission order)",
        "a fetch of the first N candidates (LIMIT 8) before choosing by priority in memory",
        (
            "                if job.status is JobStatus.PENDING and job.run_at <= now\n"
            "            ]\n",
            "                if job.status is JobStatus.PENDING and job.run_at <= now\n"
            "            ][:8]\n",
        ),
    ),
    _job_scope(
        "jobs-backoff-table-of-three",
        "backoff from a table of three doublings: from the 4th attempt on it stays base * 4",
        "a retry schedule written out as [1x, 2x, 4x] and its last entry reused",
        (
            "        doubled: int = self._policy.base_backoff_millis * 2 ** (attempts - 1)",
            "        doubled: int = self._policy.base_backoff_millis * 2 ** min(attempts - 1, 2)",
        ),
    ),
    _job_scope(
        "jobs-cap-as-last-doubling",
        "backoff stops at the last doubling below the cap, never at the cap itself",
        "'double until the next step would pass the cap', right only when the cap is base * 2**k",
        (
            _BACKOFF,
            "        doubled: int = self._policy.base_backoff_millis\n"
            "        for _ in range(attempts - 1):\n"
            "            if doubled * 2 > self._policy.max_backoff_millis:\n"
            "                break\n"
            "            doubled *= 2\n"
            "        return doubled\n",
        ),
    ),
    _job_scope(
        "jobs-attempts-capped-at-five",
        "a job is dead after at most 5 attempts, whatever max_attempts says",
        "a hard-coded retry limit left beside the policy that replaced it",
        (
            "        if job.attempts < self._policy.max_attempts:",
            "        if job.attempts < min(self._policy.max_attempts, 5):",
        ),
    ),
)
"""Bugs only a scope of a dozen jobs and six attempts reaches (jobs.model-check's
seeded parts): ids past J9, ten ready jobs, the 4th to 6th attempts, a cap between
two doublings."""


def _lease_scope(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "worker", bug_class, real_world, "lease.model-check", tuple(edits))


LEASE_SCOPE: tuple[Mutant, ...] = (
    _lease_scope(
        "ticket-attempt-top-refused",
        "finish refuses a ticket of attempt 16, the last one max_attempts=16 allows",
        "a range check written as attempt < 16, so a job's last attempt can never finish",
        (
            '    _check_int("finish", "ticket[\'attempt\']", ticket["attempt"], 1, 16)',
            '    _check_int("finish", "ticket[\'attempt\']", ticket["attempt"], 1, 15)',
        ),
    ),
    _lease_scope(
        "budget-top-refused",
        "enqueue refuses max_attempts=16, the top of its range",
        "an exclusive upper bound where the contract's range includes its end",
        (
            '    _check_int("enqueue", "max_attempts", max_attempts, 1, 16)',
            '    _check_int("enqueue", "max_attempts", max_attempts, 1, 15)',
        ),
    ),
)
"""Bugs at the tops of the lease ranges that lease.model-check reaches only from its
seeded start states (a job one attempt below its budget of 16, the edge table's ends)."""


BLIND: tuple[Mutant, ...] = (
    Mutant(
        "finish-ignores-attempt",
        "worker",
        "finish leaves the ticket's attempt out of the lease marker it compares",
        "a ticket check that compares the token, the owner and the times and trusts the "
        "rest; the ci run's random tickets missed it for two seeds in four",
        "lease.edges",
        (('    ("attempts", "attempt"),\n', ""),),
    ),
    Mutant(
        "rollback-on-exception-only",
        "worker",
        "the transaction helper rolls back on Exception only: a KeyboardInterrupt or "
        "SystemExit before COMMIT leaves the transaction open and its writes pending",
        "the habit of writing `except Exception:` around a transaction; Ctrl-C in a "
        "worker's fault hook (or a signal handler raising SystemExit) then keeps the lock",
        "lease.edges",
        (
            (
                "    except BaseException:\n        if con.in_transaction:",
                "    except Exception:\n        if con.in_transaction:",
            ),
        ),
    ),
    Mutant(
        "run-file-skips-open-queue",
        "worker",
        "run_file connects with sqlite3.connect itself instead of opening with open_queue, "
        "so a file left in WAL mode stays in WAL mode",
        "a shortcut that copies open_queue's connect line but not its pragmas; on files "
        "the target made itself it behaves the same",
        "lease.configuration",
        (
            (
                "    con = open_queue(path)\n",
                "    con = sqlite3.connect(path, isolation_level=None, timeout=1)\n",
            ),
        ),
    ),
    Mutant(
        "run-file-closes-on-exception-only",
        "worker",
        "run_file closes its connection on success and in `except Exception`: a send that "
        "raises KeyboardInterrupt or SystemExit leaves it open",
        "the habit of `except Exception:` again, here around a close; only Ctrl-C shows it",
        "lease.configuration",
        (
            (
                "        return run_once(con, owner, clock, send, jitter, lease_ms)\n"
                "    finally:\n        con.close()",
                "        result = run_once(con, owner, clock, send, jitter, lease_ms)\n"
                "    except Exception:\n        con.close()\n        raise\n"
                "    con.close()\n    return result",
            ),
        ),
    ),
    Mutant(
        "second-clock-read-before-send",
        "worker",
        "run_once reads both clock readings before send: a slow delivery is finished at a "
        "time read before it began",
        "reading the clock up front to keep the call short; a clock that does not move "
        "during send hides it",
        "lease.configuration",
        (
            (
                "    outcome, delay_ms = _deliver(send, ticket, jitter)\n"
                '    t2 = _read_clock(clock, "second")\n',
                '    t2 = _read_clock(clock, "second")\n'
                "    outcome, delay_ms = _deliver(send, ticket, jitter)\n",
            ),
        ),
    ),
    Mutant(
        "send-oserror-retried",
        "worker",
        "run_once treats an OSError from send (a refused connection, a timeout) as Retryable",
        "network errors look retryable; the spec says only Retryable is, and any other "
        "exception propagates with the job left leased",
        "lease.configuration",
        (
            (
                '    except Retryable:\n        return "retry"',
                '    except (Retryable, OSError):\n        return "retry"',
            ),
        ),
    ),
    Mutant(
        "ack-accepts-ok-string",
        "worker",
        'run_once takes send\'s "ok" as an acknowledgement, as well as True',
        "an HTTP client that returns the response body; the spec wants exactly True",
        "lease.configuration",
        (("    if result is not True:\n", '    if result is not True and result != "ok":\n'),),
    ),
    Mutant(
        "interrupt-hands-job-back",
        "worker",
        "a KeyboardInterrupt or SystemExit during send puts the job back to pending before it "
        "propagates: another worker claims it inside the lease",
        "a graceful shutdown that returns its work; the spec leaves the job leased",
        "lease.configuration",
        (
            (
                '    except Permanent:\n        return "permanent", 0\n',
                '    except Permanent:\n        return "permanent", 0\n'
                "    except (KeyboardInterrupt, SystemExit):\n"
                "        raise _Handback(ticket) from None\n",
            ),
            (
                "    outcome, delay_ms = _deliver(send, ticket, jitter)\n",
                "    try:\n"
                "        outcome, delay_ms = _deliver(send, ticket, jitter)\n"
                "    except _Handback as back:\n"
                "        with _transaction(con):\n"
                "            con.execute(\"UPDATE jobs SET status = 'pending', owner = NULL, \"\n"
                '                        "lease_until = NULL WHERE id = ? AND token = ?",\n'
                "                        (back.ticket['id'], back.ticket['token']))\n"
                "        raise KeyboardInterrupt from None\n",
            ),
            (
                "def _deliver(\n",
                "class _Handback(BaseException):\n"
                "    def __init__(self, ticket):  # type: ignore[no-untyped-def]\n"
                "        self.ticket = ticket\n\n\n"
                "def _deliver(\n",
            ),
        ),
    ),
    Mutant(
        "ticket-read-after-commit",
        "worker",
        "claim builds its ticket by reading the row again after COMMIT: a claim that took "
        "the job over in between hands its own ticket to the first claimer",
        "returning what the row says now instead of what this transaction wrote",
        "lease.interleavings",
        (
            (
                "        ticket = _lease(con, row[0], owner, now_ms, lease_ms)\n",
                "        _lease(con, row[0], owner, now_ms, lease_ms)\n        seq = row[0]\n",
            ),
            (
                '    _hook(fault, "after-commit")\n    return ticket\n',
                '    _hook(fault, "after-commit")\n'
                "    found = con.execute(\n"
                '        "SELECT id, qty, owner, token, attempts, lease_until"\n'
                '        " FROM jobs WHERE seq = ?",\n'
                "        (seq,),\n"
                "    ).fetchone()\n"
                "    keys = ('id', 'qty', 'owner', 'token', 'attempt', 'lease_until')\n"
                "    return dict(zip(keys, found))\n",
            ),
        ),
    ),
    Mutant(
        "retry-delay-exponent-clamped",
        "worker",
        "retry_delay stops doubling after attempt 13 (2**min(attempt-1, 12)), so a small "
        "base under a high cap waits 4096 * base from attempt 14 on",
        "an overflow guard on the exponent; the draws rarely pair attempt 14-16 with a base "
        "small enough that the cap does not hide it",
        "lease.edges",
        (("base_ms * 2 ** (attempt - 1))", "base_ms * 2 ** min(attempt - 1, 12))"),),
    ),
    Mutant(
        "retry-delay-epsilon-before-floor",
        "worker",
        "retry_delay adds 1e-9 before the floor, so a product a hair under a whole number "
        "(a jitter just under 1) rounds up",
        "a fix for float noise; every dyadic jitter gives an exact product, which hides it",
        "lease.edges",
        (("return math.floor(capped * jitter)", "return math.floor(capped * jitter + 1e-9)"),),
    ),
    Mutant(
        "ids-looked-up-with-like",
        "worker",
        "jobs are looked up with `id LIKE ?`: 'ABC' finds 'abc' and 'a_c' finds 'abc' "
        "(case-insensitive, `_` matches any character), so distinct jobs collide",
        "LIKE where = was meant; with ids like 'a', 'b', 'j1' every lookup is exact",
        "lease.edges",
        (("FROM jobs WHERE id = ?", "FROM jobs WHERE id LIKE ?"),),
    ),
    Mutant(
        "jitter-isfinite-before-range",
        "worker",
        "jitter is checked for finiteness before its range: an int past a float's range "
        "(10**400) raises OverflowError, not ValueError",
        "`math.isfinite(j) and 0 <= j <= 1`: the natural order, and every float passes "
        "through it alike; only an int too big for a float tells",
        "lease.edges",
        (
            (
                "    if not (0 <= jitter <= 1 and math.isfinite(jitter)):",
                "    if not (math.isfinite(jitter) and 0 <= jitter <= 1):",
            ),
        ),
    ),
    Mutant(
        "redrive-resets-before-audit",
        "worker",
        "redrive resets the job before it writes the audit row: at 'after-audit' the job is "
        "already pending",
        "`UPDATE ... RETURNING token` first, then the audit insert with the token it returned; "
        "a crash at either hook rolls both back, so only a hook that looks can tell",
        "lease.configuration",
        (
            (
                '        con.execute(AUDIT, (job_id, row["token"], now_ms, note))\n'
                '        _hook(fault, "after-audit")\n'
                '        con.execute(REDRIVE, (now_ms, now_ms + ttl_ms, row["seq"]))\n',
                '        con.execute(REDRIVE, (now_ms, now_ms + ttl_ms, row["seq"]))\n'
                '        con.execute(AUDIT, (job_id, row["token"], now_ms, note))\n'
                '        _hook(fault, "after-audit")\n',
            ),
        ),
    ),
    Mutant(
        "fault-skipped-when-falsy",
        "worker",
        "the fault hook is called only when it is truthy (`if fault:`): a callable that is "
        "falsy, such as an empty list subclass that records points, is never called",
        "`if fault:` where `if fault is not None:` was meant; every function or lambda is truthy",
        "lease.configuration",
        (
            (
                "    if fault is not None:\n        fault(point)",
                "    if fault:\n        fault(point)",
            ),
        ),
    ),
)
"""Bugs that helpers wrote blind from lease-worker.md alone and that every property
passed: in the fifteenth session, before the edge sweep learned near-miss tickets and
faults that are no ``Exception``, and lease.configuration a queue file left in WAL mode;
in the sixteenth, before it walked retry_delay's doubling to attempt 16, jitters just
under 1 and ids that look alike; in the seventeenth, before lease.configuration's hooks
looked at the queue and one of them was falsy, and before a jitter past a float's range."""

BLIND_JOBS: tuple[Mutant, ...] = (
    Mutant(
        "jobs-backoff-exponent-clamped",
        "jobs",
        "the backoff stops doubling after the 11th attempt (2**min(n-1, 10)), so a policy "
        "with more attempts and a high cap waits too little",
        "an overflow guard on the exponent; the draws stop at 6 attempts",
        "jobs.edges",
        (
            (
                "base_backoff_millis * 2 ** (attempts - 1)",
                "base_backoff_millis * 2 ** min(attempts - 1, 10)",
            ),
        ),
    ),
    Mutant(
        "jobs-best-job-by-one-score",
        "jobs",
        "the best job is the one with the highest priority * 10**9 - run_at: with epoch-sized "
        "run-ats an earlier job of lower priority wins",
        "one sort key where a tuple was meant; run-ats of a few hundred ms never show it",
        "jobs.edges",
        (
            (
                "key=lambda j: (-j.priority, j.run_at, j.seq)",
                "key=lambda j: (-(j.priority * 10**9 - j.run_at), j.seq)",
            ),
        ),
    ),
    Mutant(
        "jobs-blank-means-ascii",
        "jobs",
        "a type is blank only if it is empty or ASCII spaces and controls (Java's trim()): "
        "an ideographic space is accepted as a type",
        "a port of Java's trim().isEmpty(); every ASCII test passes",
        "jobs.edges",
        (
            (
                "if job_type is None or not job_type.strip():",
                "if job_type is None or not job_type.strip(''.join(map(chr, range(33)))):",
            ),
        ),
    ),
    Mutant(
        "jobs-id-parsed-as-int",
        "jobs",
        "ids are looked up by int(job_id[1:]): 'J01', 'J 1' and 'J1 ' all find J1",
        "storing jobs by number and parsing the id back; every id the queue hands out "
        "parses to itself",
        "jobs.edges",
        (
            (
                "job = self._jobs.get(job_id) if isinstance(job_id, str) else None",
                "job = _by_number(self._jobs, job_id)",
            ),
            (
                "class JobQueue:",
                "def _by_number(jobs, job_id):  # type: ignore[no-untyped-def]\n"
                "    try:\n"
                "        return jobs.get(f'J{int(str(job_id)[1:])}')\n"
                "    except ValueError:\n"
                "        return None\n\n\n"
                "class JobQueue:",
            ),
        ),
    ),
    Mutant(
        "jobs-lease-capped-at-12-hours",
        "jobs",
        "poll caps a lease at 12 hours, as some cloud queues cap a visibility timeout: a "
        "worker that asked for a day loses its job after 12",
        "a limit copied from SQS; leases of a few ms never reach it",
        "jobs.edges",
        (
            (
                "job.lease_until = now + lease_for",
                "job.lease_until = now + min(lease_for, 43_200_000)",
            ),
        ),
    ),
    Mutant(
        "jobs-retry-dead-own-lock",
        "jobs",
        "retry_dead takes a lock of its own, not the queue's: a poll can lease the job "
        "between its PENDING and its attempts = 0",
        "a second lock added for one method; every test that calls one method at a time passes",
        "jobs.interleavings",
        (
            (
                '        """Put a DEAD job back: PENDING, attempts 0, ready now."""\n'
                "        with self._lock:",
                '        """Put a DEAD job back: PENDING, attempts 0, ready now."""\n'
                "        with self._retry_lock:",
            ),
            (
                "        self._lock = threading.Lock()\n",
                "        self._lock = threading.Lock()\n"
                "        self._retry_lock = threading.Lock()\n",
            ),
        ),
    ),
    Mutant(
        "jobs-dead-letters-viewed-unlocked",
        "jobs",
        "dead_letters picks the DEAD jobs under the lock but builds their views after it: "
        "a retry_dead in between lists a PENDING job as a dead letter",
        "keeping the critical section short; the views are built from live job objects",
        "jobs.interleavings",
        (
            (
                "            return [job.view() for job in self._jobs.values() "
                "if job.status is JobStatus.DEAD]",
                "            dead = [job for job in self._jobs.values() "
                "if job.status is JobStatus.DEAD]\n"
                "        return [job.view() for job in dead]",
            ),
        ),
    ),
    Mutant(
        "jobs-lease-built-after-unlock",
        "jobs",
        "poll builds its Lease after releasing the lock: a poll that expires the lease in "
        "between changes the job the first poll then reads",
        "returning outside the `with` block to keep the critical section short",
        "jobs.interleavings",
        (
            (
                "            job.lease_until = now + lease_for\n"
                "            return Lease(job.id, job.token, job.type, job.payload, job.attempts, "
                "job.lease_until)",
                "            job.lease_until = now + lease_for\n"
                "        return Lease(job.id, job.token, job.type, job.payload, job.attempts, "
                "job.lease_until)",
            ),
        ),
    ),
    Mutant(
        "jobs-table-shared-between-queues",
        "jobs",
        "the job table is a class attribute: every JobQueue sees the jobs of every other",
        "a mutable default at class level (`_jobs: dict = {}`), a classic Python slip; one "
        "queue per test hides it",
        "jobs.agreement",
        (
            ("        self._jobs: dict[str, _Job] = {}\n", ""),
            (
                "    def __init__(self, time: TimeSource, policy: RetryPolicy) -> None:\n",
                "    _jobs: dict[str, _Job] = {}\n\n"
                "    def __init__(self, time: TimeSource, policy: RetryPolicy) -> None:\n",
            ),
        ),
    ),
    Mutant(
        "jobs-dead-letters-shared-list",
        "jobs",
        "dead_letters() hands out the list it caches: a caller that empties its list "
        "empties the queue's next answer too",
        "a cache of the dead letters, invalidated on every change, returned as it is "
        "instead of as a copy",
        "jobs.edges",
        (
            (
                "        self._last_token = 0\n",
                "        self._last_token = 0\n        self._dead: list[JobView] | None = None\n",
            ),
            (
                "            return [job.view() for job in self._jobs.values()"
                " if job.status is JobStatus.DEAD]",
                "            if self._dead is None:\n"
                "                self._dead = [job.view() for job in self._jobs.values()"
                " if job.status is JobStatus.DEAD]\n"
                "            return self._dead",
            ),
            (
                "            job.run_at = self._time.now_millis()\n",
                "            job.run_at = self._time.now_millis()\n            self._dead = None\n",
            ),
            (
                "            job.status = JobStatus.DEAD\n",
                "            job.status = JobStatus.DEAD\n            self._dead = None\n",
            ),
        ),
    ),
    Mutant(
        "jobs-error-truncated",
        "jobs",
        "fail keeps only the first 200 characters of the error",
        "a column width or a log-line habit applied to last_error; short errors pass",
        "jobs.edges",
        (
            (
                "DEFAULT_ERROR if message is None else message, now)",
                "DEFAULT_ERROR if message is None else message[:200], now)",
            ),
        ),
    ),
    Mutant(
        "jobs-token-compared-by-identity",
        "jobs",
        "complete and fail compare the token with `is not`: an equal token that is another "
        "object (an int past 256, a copy that crossed a wire) is refused",
        "`is` where `==` was meant; CPython caches ints up to 256, so every test with a few "
        "polls passes",
        "jobs.edges",
        (("        if token != job.token:", "        if token is not job.token:"),),
    ),
    Mutant(
        "jobs-tokens-random-20-bits",
        "jobs",
        "tokens are 20 random bits (`random.getrandbits(20)`): they repeat after about a "
        "thousand polls of one queue",
        "a random token instead of a counter, too short for the birthday bound; the blind one "
        "was `secrets.token_hex(4)` (32 bits, repeating after about 77,000 polls), which "
        "jobs.edges finds at deep for certain and at ci on some runs",
        "jobs.edges",
        (
            ("import threading\n", "import random\nimport threading\n"),
            (
                "            self._last_token += 1",
                "            self._last_token = random.getrandbits(20)",
            ),
        ),
    ),
    Mutant(
        "jobs-order-lost-after-32-cancels",
        "jobs",
        "once more than 32 jobs are cancelled, poll takes the ready jobs in submission order",
        "a heap with lazy deletion compacted (dead entries filtered out) without heapify "
        "once more than 32 are dead: the list is no longer a heap; the machines stop at 12 jobs",
        "jobs.edges",
        (
            (
                "            job.status = JobStatus.CANCELLED\n",
                "            job.status = JobStatus.CANCELLED\n"
                "            self._cancels = getattr(self, '_cancels', 0) + 1\n",
            ),
            (
                "            job = min(ready, key=lambda j: (-j.priority, j.run_at, j.seq))",
                "            job = (ready[0] if getattr(self, '_cancels', 0) > 32\n"
                "                   else min(ready, key=lambda j: (-j.priority, j.run_at, j.seq)))",
            ),
        ),
    ),
    Mutant(
        "jobs-expiry-batch-of-16",
        "jobs",
        "at most 16 expired leases are processed per call; the rest wait for the next call",
        "a bounded batch of housekeeping per call (to keep a poll's latency flat): with 17 "
        "leases ending together, one stays RUNNING past its end",
        "jobs.edges",
        (
            (
                "        for job in self._jobs.values():\n"
                "            if job.status is JobStatus.RUNNING and now >= job.lease_until:\n",
                "        ended = [j for j in self._jobs.values()\n"
                "                 if j.status is JobStatus.RUNNING and now >= j.lease_until]\n"
                "        for job in ended[:16]:\n"
                "            if True:\n",
            ),
        ),
    ),
    Mutant(
        "jobs-backoff-by-float-pow",
        "jobs",
        "backoff computed in floats (`math.pow`): past 2**53 it is rounded, `2**53 + 1` "
        "becomes `2**53`",
        "Java's Math.pow carried over, or `2.0 ** n`: exact for every backoff a test draws",
        "jobs.edges",
        (
            ("import threading\n", "import math\nimport threading\n"),
            (
                "        doubled: int = self._policy.base_backoff_millis * 2 ** (attempts - 1)",
                "        doubled: int = int(self._policy.base_backoff_millis"
                " * math.pow(2, attempts - 1))",
            ),
        ),
    ),
)
"""Bugs helpers wrote blind from job-queue.md alone that every property passed: in the
fifteenth session no property emptied a list the queue had returned, failed a job with
a long error, or handed a token back as an equal copy past 256; in the sixteenth none
made a second queue, walked the backoff past 6 attempts, used epoch-sized times, leases
of a day, Unicode blanks or look-alike ids, or polled after a lease ended mid-poll; until
the seventeenth none polled one queue more than a few hundred times, held more than a
dozen jobs, or backed off past 2**53 ms."""

MUTANTS: tuple[Mutant, ...] = (
    CONFIGURATION + EDGES + SENTENCES + JOB_SENTENCES + JOB_SCOPE + LEASE_SCOPE + BLIND + BLIND_JOBS
)
