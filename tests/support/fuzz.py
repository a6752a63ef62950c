"""Shared hypothesis settings and a small JSON strategy for the `test_*_properties.py` suites.

Derandomized, so every run tries the same examples and a failure reproduces; hypothesis
prints the falsifying example and, with ``print_blob``, a blob to replay it with
``@reproduce_failure``. ``FLUXNODE_FUZZ_EXAMPLES`` raises the example count for a longer
local run (default 150 per property: about a minute for all suites on one core).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("FLUXNODE_FUZZ_EXAMPLES", "150"))

PROFILE = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    print_blob=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=20,
)
"""Any JSON value, small: what a peer may put where an object is expected."""
