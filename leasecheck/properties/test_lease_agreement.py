"""lease.agreement: the target worker and the reference model agree on every step.

Runs ``stateful_tests.lease_machine.LeaseAgreement`` against the target chosen by
``--impl`` (default: the bundled worker), with the Hypothesis settings of the
active profile (``quick``, ``ci`` or ``deep``): its example count and steps per
example come from ``lc_profile``. A disagreement fails with the shrunk program and
a message naming the comparison that failed, both sides side by side.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from leasecheck.plugin import Checked
from leasecheck.profiles import Profile
from stateful_tests.lease_machine import LeaseAgreement


@pytest.mark.leasecheck("lease.agreement")
def test_lease_agreement(worker_target: ModuleType, lc_profile: Profile, checked: Checked) -> None:
    LeaseAgreement.bind(worker_target)
    run_state_machine_as_test(
        LeaseAgreement,
        settings=settings(
            settings.get_profile("leasecheck"),  # explain phase already off (profiles.py)
            max_examples=lc_profile.max_examples,
            stateful_step_count=lc_profile.step_count,
        ),
    )
    checked(
        f"{lc_profile.max_examples} programs of up to {lc_profile.step_count} steps",
        programs=lc_profile.max_examples,
        steps=lc_profile.step_count,
    )
