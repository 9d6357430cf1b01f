"""``python -m leasecheck`` is the ``leasecheck`` command."""

import sys

from leasecheck.cli import main

if __name__ == "__main__":  # not when a spawned process imports this as ``__mp_main__``
    sys.exit(main())
