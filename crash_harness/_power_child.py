"""The traced child of ``lease.power-loss``: open the queue, run the ops, acknowledge each.

Run as ``python -m crash_harness._power_child SPEC.json`` under strace. SPEC names the
target file, the queue file, the marker file and the ops. After each operation
returns (or raises) to its caller, the child writes one line to the marker file:
that write, in the recorded system calls, is the instant the caller was told. At the
end it writes every outcome and the connection's journal mode and synchronous
setting to the results file (pickled: ``ChildResult`` keeps ``True`` apart from ``1``).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from leasecheck.crash_harness.engine import ChildResult, ErrorInfo
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.targets.loader import load_module


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec``'s ops on its target; return the outcomes and the connection's pragmas."""
    module = load_module(spec["target"], "lease worker")
    marker = os.open(spec["marker"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    con = module.open_queue(spec["db"])
    try:
        (journal,) = con.execute("PRAGMA journal_mode").fetchone()
        (synchronous,) = con.execute("PRAGMA synchronous").fetchone()
        outcomes = []
        for index, data in enumerate(spec["ops"]):
            try:
                outcomes.append(ChildResult(LeaseOp.from_json(data).apply(module, con)))
            except Exception as error:
                outcomes.append(ChildResult(error=ErrorInfo.from_exception(error)))
            os.write(marker, f"ack {index}\n".encode())
    finally:
        con.close()
        os.close(marker)
    return {"outcomes": outcomes, "journal_mode": str(journal), "synchronous": int(synchronous)}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    Path(spec["results"]).write_bytes(pickle.dumps(run(spec)))


if __name__ == "__main__":
    main()
