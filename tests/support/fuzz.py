"""Shared hypothesis settings for the `test_*_properties.py` suites (issue 11).

Derandomized, so every run tries the same examples and a failure reproduces; hypothesis
prints the falsifying example and, with ``print_blob``, a blob to replay it with
``@reproduce_failure``. ``FLUXNODE_FUZZ_EXAMPLES`` raises the example count for a longer
local run (default 150 per property: about a minute for all suites on one core).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("FLUXNODE_FUZZ_EXAMPLES", "150"))

PROFILE = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    print_blob=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
