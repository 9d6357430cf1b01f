"""The compatibility name ``queue_impl``: target files written against the old layout.

leasecheck installs one namespace, ``leasecheck.*``. A JobQueue file that imports the
given types with ``from queue_impl.jobs import ...`` keeps working through this
package, whose ``jobs`` module re-exports the very objects of ``leasecheck.jobs``.
"""

__all__: list[str] = []
