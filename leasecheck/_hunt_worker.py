"""What ``leasecheck hunt`` changes in HypoFuzz's worker processes: finds stay found.

HypoFuzz saves a failure's choice sequence to the shared database, every choice the
test made, forced ones included (``observation.metadata.choice_nodes``). A worker that
starts, or hears of another worker's find, replays that sequence through its own
provider, which Hypothesis asks only for the choices that are *not* forced
(``ConjectureData._draw``: a forced draw never reaches the provider). So from the first
forced draw on, every value is given to the wrong draw. A state machine forces draws
all the time: Hypothesis chooses each step's rule with a filtered ``sampled_from``, and
after three rules whose preconditions fail it forces the index of one that holds. The
replay then runs some other program, passes, and HypoFuzz *downgrades* the failure
(``HypofuzzProvider.downgrade_failure``): it deletes it from the keys ``check`` replays
(the primary and ``.secondary`` keys) and keeps it only under ``.fixed``, which no
``check`` reads.

Seen in a fleet: a second hunt on the same Redis moved the first hunt's find to
``.fixed`` within seconds, and no ``check`` replayed it; one hunt started after another
did the same to the finds it inherited. Hypothesis' own replay of the same entry
(``reproduce_failure``, and ``check --db``) reproduces it exactly.

So a hunt keeps failures where they are: ``keep_finds`` makes HypoFuzz's downgrade of a
shrunk or unshrunk failure do nothing in the hunt's own worker processes. A failure
that was really fixed is still cleaned up: ``check --db`` replays it with Hypothesis,
which deletes an entry that no longer fails. Only the hunt's processes are touched (the
plugin calls this when ``LEASECHECK_HUNT`` is set); with a HypoFuzz that has no such
method nothing is changed, and ``tests/test_fleet.py`` shows what is lost then.
"""

from __future__ import annotations

from typing import Any

__all__ = ["keep_finds"]

_MARK = "_leasecheck_keeps_finds"


def keep_finds() -> bool:
    """Make HypoFuzz's provider keep shrunk and unshrunk failures it could not replay;
    True if it is in place (also when it already was), False without HypoFuzz or its
    ``downgrade_failure``."""
    try:
        from hypofuzz.database import FailureState
        from hypofuzz.provider import HypofuzzProvider
    except ImportError:
        return False
    original = getattr(HypofuzzProvider, "downgrade_failure", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True
    kept = (FailureState.SHRUNK, FailureState.UNSHRUNK)

    def downgrade_failure(self: Any, choices: Any, observation: Any, *, state: Any) -> None:
        if state in kept:
            return  # HypoFuzz's replay misses forced draws: its pass proves nothing
        original(self, choices, observation, state=state)

    setattr(downgrade_failure, _MARK, True)
    HypofuzzProvider.downgrade_failure = downgrade_failure  # type: ignore[method-assign]
    return True
