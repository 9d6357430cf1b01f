"""lease.agreement: the target worker and the reference model agree on every step.

Runs ``stateful_tests.lease_machine.LeaseAgreement`` against the target chosen by
``--impl`` (default: the bundled worker), with the Hypothesis settings of the
active profile (``quick``, ``ci`` or ``deep``): its example count and steps per
example come from the profile. A disagreement fails with the shrunk program and
a message naming the comparison that failed, both sides side by side.

The property is a ``TestCase`` (``leasecheck.machine_property``) so that
``leasecheck hunt`` fuzzes it under HypoFuzz with the example-database key that
``check`` replays.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import settings

from leasecheck.machine_property import machine_test_case
from leasecheck.plugin import Checked, active_run
from leasecheck.stateful_tests.lease_machine import LeaseAgreement

PROFILE = active_run().profile  # the plugin chose it before pytest imports this module


@pytest.fixture(autouse=True)
def _bind_target(worker_target: ModuleType, checked: Checked) -> None:
    LeaseAgreement.bind(worker_target)
    checked(
        f"{PROFILE.max_examples} programs of up to {PROFILE.step_count} steps",
        programs=PROFILE.max_examples,
        steps=PROFILE.step_count,
    )


TestLeaseAgreement = pytest.mark.leasecheck("lease.agreement")(
    machine_test_case(
        "TestLeaseAgreement",
        LeaseAgreement,
        settings(
            settings.get_profile("leasecheck"),  # explain phase already off (profiles.py)
            max_examples=PROFILE.max_examples,
            stateful_step_count=PROFILE.step_count,
        ),
        __name__,
    )
)
