"""What ``leasecheck hunt`` changes in HypoFuzz's worker processes: exact replays, whole shrinks,
hunts that run their minutes, finds that survive a stop.

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

``publish_targets`` keeps HypoFuzz from ending a hunt long before its ``--minutes``.
HypoFuzz's hub wakes every 60 s and stops once no worker lists a test left to fuzz; a
worker writes that list only after each round of 100 inputs, and it starts empty. A
target that needs more than a minute for its first round (a queue library on a real
server, a slow queue) lost its hub at the first minute check, and the worker died at the
end of the round writing to the stopped hub (BrokenPipeError): ``tests/test_fleet.py``'s
hunt of a JobQueue that takes 0.3 s to start ended after 71 s of its 90, exit 2.

``keep_finds`` keeps a stop from dropping half a find. HypoFuzz saves a failure as its
choices and then, in a second write, its observation, and at start-up it replays only
the failures that have one. A SIGINT between the two writes left the choices alone;
and both go through a background thread (``BackgroundWriteDatabase``) whose queue a
worker process dropped when it stopped (it is forked, and ends with ``os._exit``).
``check --db`` still replays such a find, but no later hunt does, so on fixed code each
one reported it as FOUND (``tests/test_fleet.py``: seen under load, and planted).
"""

from __future__ import annotations

import inspect
import os
import random
import signal
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "FLUSH_WITHIN",
    "align_replays",
    "finish_shrinks",
    "flush_writes",
    "keep_finds",
    "prepare",
    "publish_targets",
    "replay_probe",
]

_MARK = "_leasecheck_patched"
"""Set on each function this module puts in HypoFuzz's or Hypothesis' place: patched once only."""


def prepare() -> dict[str, bool]:
    """Everything a hunt's worker needs here; which of them are in place."""
    return {
        "align_replays": align_replays(),
        "finish_shrinks": finish_shrinks(),
        "publish_targets": publish_targets(),
        "keep_finds": keep_finds(),
    }


FLUSH_WITHIN: Final = 10.0
"""Seconds a stopping worker waits for its database writes (the hunt SIGKILLs what is left
15 s after its SIGINT, ``hunt.STOP_GRACE``)."""

_WRITERS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
"""Every ``BackgroundWriteDatabase`` of this process that has queued a write, by its id
(it compares by the database it wraps, so it has no hash)."""


def keep_finds() -> bool:
    """Make a stop keep every find whole: a failure's choices and its observation are
    saved with SIGINT held back until both are queued (``FailureEntry.save``), and the
    worker writes out every queued write before it exits (``flush_writes``, run by
    multiprocessing's exit hooks, which a forked worker runs before ``os._exit``).
    True if in place (also when it already was); False where the internals this relies
    on differ: nothing is changed then."""
    try:
        from hypofuzz.database.database import FailureEntry
        from hypothesis.database import BackgroundWriteDatabase, InMemoryExampleDatabase
    except ImportError:
        return False
    ensure, save = (getattr(cls, name, None) for cls, name in (
        (BackgroundWriteDatabase, "_ensure_thread"), (FailureEntry, "save"),
    ))  # fmt: skip
    if ensure is None or save is None:
        return False
    if getattr(save, _MARK, False):
        _flush_at_exit()  # a worker forked after the patch has no exit hooks of its own
        return True
    if not hasattr(BackgroundWriteDatabase(InMemoryExampleDatabase()), "_queue"):
        return False

    def _ensure_thread(self: Any) -> None:
        _WRITERS[id(self)] = self
        ensure(self)

    def _save(self: Any, *args: Any, **kwargs: Any) -> None:
        _uninterrupted(lambda: save(self, *args, **kwargs))

    _flush_at_exit()
    for function in (_ensure_thread, _save):
        setattr(function, _MARK, True)
    BackgroundWriteDatabase._ensure_thread = _ensure_thread  # type: ignore[method-assign]
    FailureEntry.save = _save  # type: ignore[method-assign]
    return True


_HOOKED_IN: set[int] = set()
"""The processes that registered ``flush_writes`` as an exit hook: a forked child starts
with none (multiprocessing clears them) though it inherits the patched classes."""


def _flush_at_exit() -> None:
    if os.getpid() not in _HOOKED_IN:
        from multiprocessing import util

        util.Finalize(None, flush_writes, exitpriority=100)  # before the other exit hooks
        _HOOKED_IN.add(os.getpid())


def flush_writes(within: float = FLUSH_WITHIN) -> bool:
    """Wait until every background database writer of this process has written all it
    was given, for ``within`` seconds at most; True if nothing is left."""
    deadline = time.monotonic() + within
    for writer in list(_WRITERS.values()):
        thread = writer._thread
        if thread is None or not thread.is_alive():  # one a fork copied: nothing writes it
            continue
        queue = writer._queue
        with queue.all_tasks_done:
            while queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                queue.all_tasks_done.wait(left)
    return True


def _uninterrupted(call: Callable[[], None]) -> None:
    """Run ``call`` with SIGINT held back (in the main thread, where Python handles it),
    then deliver one that came meanwhile."""
    if threading.current_thread() is not threading.main_thread():
        call()
        return
    came: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    try:
        call()
    finally:
        signal.signal(signal.SIGINT, previous)
        if came:
            signal.raise_signal(signal.SIGINT)


def publish_targets() -> bool:
    """Make a HypoFuzz worker tell the hub its tests as soon as it is given them, not
    only after its first round: after ``FuzzWorker._update_targets`` it also writes the
    tests it can still fuzz (``valid_targets``: not failed, not skipped) where the hub
    reads them (``shared_state["worker_state"]["valid_nodeids"]``), as the end of each
    round does. The hub then stops a hunt only when every test has failed or been
    dropped, as HypoFuzz intends. True if in place (also when it already was); False
    where HypoFuzz or the internals this relies on differ: nothing is changed then."""
    try:
        from hypofuzz.hypofuzz import FuzzWorker
    except ImportError:
        return False
    original = getattr(FuzzWorker, "_update_targets", None)
    if original is None or not isinstance(getattr(FuzzWorker, "valid_targets", None), property):
        return False
    if getattr(original, _MARK, False):
        return True
    if "shared_state" not in inspect.signature(FuzzWorker.__init__).parameters:
        return False

    def _update_targets(self: Any, nodeids: Any) -> None:
        original(self, nodeids)
        try:
            worker_state = self.shared_state["worker_state"]
        except (AttributeError, KeyError, TypeError):  # not the layout this was made for
            return
        worker_state["valid_nodeids"] = [target.nodeid for target in self.valid_targets]

    setattr(_update_targets, _MARK, True)
    FuzzWorker._update_targets = _update_targets  # type: ignore[method-assign]
    return True


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
