"""What ``leasecheck hunt`` changes in HypoFuzz's worker processes: exact replays, whole shrinks.

HypoFuzz saves a test case as every choice the test made, forced ones included
(``observation.metadata.choice_nodes``), and replays a saved one through its provider
(``HypofuzzProvider._pop_choice``, one saved choice per draw). But Hypothesis asks the
provider only for the choices it does not force (``ConjectureData._draw``: a forced
draw never reaches it). So from the first forced draw on, every saved value went to
the wrong draw. A state machine forces draws all the time: Hypothesis chooses each
step's rule with a filtered ``sampled_from``, and after three picks whose preconditions
fail it forces the index of a rule that holds. The replay then ran some other program
and passed, and HypoFuzz *downgraded* the failure (``downgrade_failure``): it deleted
it from the keys ``check`` replays (the primary and ``.secondary`` keys) and kept it
only under ``.fixed``, which no ``check`` reads.

Seen in a fleet: a second hunt on the same Redis moved the first hunt's find to
``.fixed`` within seconds, and no ``check`` replayed it; a hunt started after another
did the same to the finds it inherited. Hypothesis' own replay of the same entry
(``reproduce_failure``, and ``check --db``) reproduces it exactly.

``align_replays`` makes a forced draw also pass over its saved choice while HypoFuzz
replays, as Hypothesis' own replay does (``ConjectureData._draw`` pops the prefix for
a forced draw too). A replay is then the test case that was saved: a failure that
still fails is kept, and one that no longer does is downgraded as HypoFuzz intends.
Only the hunt's processes are touched (the plugin calls this when ``LEASECHECK_HUNT``
is set). It checks first that this HypoFuzz replays misaligned (a replay of three saved
choices with a forced one in the middle), and changes nothing where it does not, or
where the internals it relies on differ.

``finish_shrinks`` works around a second mismatch of versions, which exact replays
brought out (a replayed failure is shrunk at once): HypoFuzz 25.11 reads an attribute
that Hypothesis 6.170 removed at the end of every shrink (``tests/test_fleet.py``
shows both).
"""

from __future__ import annotations

import inspect
import random
from typing import Any

__all__ = ["align_replays", "finish_shrinks", "prepare", "replay_probe"]

_MARK = "_leasecheck_aligns_replays"


def prepare() -> dict[str, bool]:
    """Everything a hunt's worker needs here; which of them are in place."""
    return {"align_replays": align_replays(), "finish_shrinks": finish_shrinks()}


def finish_shrinks() -> bool:
    """Let HypoFuzz finish a shrink: after shrinking a failure it copies the explain
    phase's comments from the shrinker's result (``shrink_target.slice_comments``), an
    attribute Hypothesis' ``ConjectureResult`` no longer has (6.170): the worker died
    with an AttributeError at every shrink, before it saved the shrunk failure. Gives the
    result class an empty ``slice_comments`` where it has none (HypoFuzz only copies it
    onto the data it runs once more); True if it has one now."""
    try:
        from hypothesis.internal.conjecture.data import ConjectureResult
    except ImportError:
        return False
    if not hasattr(ConjectureResult, "slice_comments"):
        ConjectureResult.slice_comments = property(lambda self: {})  # type: ignore[attr-defined]
    return True


def align_replays() -> bool:
    """Make HypoFuzz's replay of a saved choice sequence skip the choices Hypothesis
    forces; True if in place (also when it already was). False where HypoFuzz or the
    internals this relies on are missing, or where HypoFuzz's replay is already aligned
    (``_misaligned`` asks it): nothing is changed then."""
    try:
        from hypofuzz.provider import HypofuzzProvider
        from hypothesis.internal.conjecture.data import ConjectureData
    except ImportError:
        return False
    original = ConjectureData._draw
    if getattr(original, _MARK, False):
        return True
    if not {"observe", "forced"} <= set(inspect.signature(original).parameters):
        return False
    if _misaligned() is not True:
        return False

    def _draw(self: Any, choice_type: Any, constraints: Any, *, observe: bool = True,
              forced: Any = None) -> Any:  # fmt: skip
        if forced is not None and observe and isinstance(self.provider, HypofuzzProvider):
            state = getattr(self.provider, "_state", None)
            if state is not None and state.choice_index < len(state.choices):
                state.choice_index += 1  # the saved sequence holds this forced choice
        return original(self, choice_type, constraints, observe=observe, forced=forced)

    setattr(_draw, _MARK, True)
    ConjectureData._draw = _draw  # type: ignore[method-assign]
    if _misaligned() is not False:
        ConjectureData._draw = original  # type: ignore[method-assign]
        return False
    return True


def _misaligned() -> bool | None:
    """True if HypoFuzz's replay gives a forced draw's saved choice to the next draw
    (``replay_probe`` draws (7, 3, 3)), False if it is aligned ((7, 3, 9)), None if the
    probe cannot run with this HypoFuzz."""
    drawn = replay_probe()
    if drawn is None or drawn[:2] != (7, 3) or drawn[2] not in (3, 9):
        return None
    return drawn[2] == 3


def replay_probe() -> tuple[int, int, int] | None:
    """What HypoFuzz's provider draws replaying the saved choices (7, 3, 9) when the
    second draw is forced to 3; None if the probe cannot run with this HypoFuzz."""
    try:
        from hypofuzz.provider import HypofuzzProvider, State
        from hypothesis.internal.conjecture.data import ConjectureData

        data = ConjectureData(provider=HypofuzzProvider, random=random.Random(0))
        data.provider._state = State(  # type: ignore[attr-defined]
            choices=(7, 3, 9), priority=None, start_time=0.0,
            save_rolling_observation=False, rolling_observation_stability=False,
        )  # fmt: skip
        first, forced = data.draw_integer(0, 10), data.draw_integer(0, 10, forced=3)
        return first, forced, data.draw_integer(0, 10)
    except Exception:
        return None
