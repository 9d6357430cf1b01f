"""Real processes, real SIGKILL: atomicity at every fault point, single-winner claims,
and duplicate-send recovery through the HTTP receiver.

- ``engine``: the one fork engine of the project (children, pipes, fault hooks,
  SIGKILL, reaping, bounded waits, cleanup of every descendant);
- ``atomicity``: kill inside every fault hook (``lease.crash-points``);
- ``random_kills``: kill at random instants of long histories (``lease.crash-random``);
- ``single_winner``: two claimers held at the instants that matter (``lease.single-winner``);
- ``races``: N processes released together from a barrier (``lease.races``);
- ``duplicate_send``: recovery after a kill right behind the receiver's commit
  (``lease.duplicate-send``).
"""

__all__: list[str] = []
