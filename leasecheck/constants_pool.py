"""The literals Hypothesis mixes into leasecheck's draws: one fixed pool, from the specs.

Hypothesis (6.131 and later) mixes the literals of every *local* module in ``sys.modules``
into its draws: an integer draw (and every ``sampled_from`` index) sometimes returns one of
them. So what a property generated depended on what else the process had imported: an
earlier property in the same xdist worker, the other files of a batch, whether leasecheck
was installed editable (its modules are local) or from a wheel (they are not). Any new
literal anywhere in leasecheck also moved the ci programs, and Hypothesis wrote
``.hypothesis/constants/`` into the user's working directory.

When the plugin is active, :func:`pin` replaces that pool with this one for the process:
what a property draws depends on the seed, the Hypothesis version and this file alone.
The values are the specs' own: the small counts and indices every range starts from,
the bounds the specs name (attempts to 16, delays to 60000 ms, ids past J9), and the
error texts the JobQueue spec treats specially. Changing this file changes the ci
programs: rerun the kill table (tests/test_mutant_catalogue.py) when you do.
"""

from __future__ import annotations

from typing import Final

INTEGERS: Final = (
    *range(-1, 17),  # counts, indices, attempts up to the spec's 16
    30, 60, 64, 100, 120, 127, 128, 150,  # short leases and delays, byte-ish bounds
    999, 1000, 1001, 5000, 15000, 30000,  # second-sized leases, either side of 1000 ms
    59999, 60000, 60001,  # the delay cap of job-queue.md, both sides
)  # fmt: skip
STRINGS: Final = ("", " ", "\t", "J1", "J2", "J9", "J10", "failed", "lease expired", "None")
FLOATS: Final = (0.0, 0.5, 1.0)


def pin() -> bool:
    """Make this process's Hypothesis draw from this pool, whatever it has imported.
    False when the installed Hypothesis has no local pool (before 6.131): nothing varies."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
        from hypothesis.internal.floats import float_to_int
        from sortedcontainers import SortedSet  # type: ignore[import-untyped]
    except ImportError:
        return False
    if not hasattr(providers, "_get_local_constants"):
        return False
    pool = Constants(
        integers=SortedSet(INTEGERS),
        floats=SortedSet(FLOATS, key=float_to_int),
        bytes=SortedSet(),
        strings=SortedSet(STRINGS),
    )
    providers._get_local_constants = lambda: pool
    providers.CONSTANTS_CACHE.cache.clear()
    return True
