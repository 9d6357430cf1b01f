"""Real processes, real SIGKILL: atomicity at every fault point, single-winner claims,
and duplicate-send recovery through the HTTP receiver."""

__all__: list[str] = []
