"""Public import path kept for users' scripts: the scratch directories live in ``targets``."""

from leasecheck.targets.scratch import SCRATCH_ENV, scratch_dir, scratch_root

__all__ = ["SCRATCH_ENV", "scratch_dir", "scratch_root"]
