"""The bundled server-backed adapters, by name: ``name -> "module:Class"``.

The same shape as the adapter registry (``adapters/registry.py``), so that the two merge
into one table; kept apart until then so the server properties can name their libraries.
"""

from __future__ import annotations

__all__ = ["SERVER_ADAPTERS"]

SERVER_ADAPTERS = {
    "pgqueuer": "leasecheck.adapters.pgqueuer:Pgqueuer",
    "pgqueuer-defaults": "leasecheck.adapters.pgqueuer:PgqueuerDefaults",
    "procrastinate": "leasecheck.adapters.procrastinate:Procrastinate",
    "rq": "leasecheck.adapters.rq:Rq",
    "rq-defaults": "leasecheck.adapters.rq:RqDefaults",
    "saq": "leasecheck.adapters.saq:Saq",
    "saq-defaults": "leasecheck.adapters.saq:SaqDefaults",
}
"""A ``-defaults`` entry opens the same library with the setting its plain adapter
avoids left at the library's default (each adapter's docstring says which and why)."""
