"""The public mutant catalogue: planted bugs that the suite must catch.

Each mutant is a small, named edit of a bundled implementation (``queue_impl/
worker.py`` or ``queue_impl/job_queue.py``): text that must occur exactly once,
and what replaces it. Keeping edits instead of whole copies means a reader sees
the bug in two lines, and a mutant that no longer applies fails loudly instead of
silently testing the unmodified file.

Entries are grouped by the property family that is meant to catch them, one
module each (``worker_bugs``, ``crash_bugs``, ``jobs_bugs``, ``explore_bugs``,
``race_bugs``); ``CATALOGUE`` gathers them all.
"""

from __future__ import annotations

from ._catalogue import CATALOGUE, Mutant, by_name, materialize

__all__ = ["CATALOGUE", "Mutant", "by_name", "materialize"]
