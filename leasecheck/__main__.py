"""``python -m leasecheck`` is the ``leasecheck`` command."""

import sys

from leasecheck.cli import main

sys.exit(main())
