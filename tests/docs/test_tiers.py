"""Every entry of the test tiers (tests/conftest.py's TIERS) names a test that exists.

A renamed test or file would leave its entry marking nothing, and the test would move into
`make check` unseen. The oracle is the test file's own source (a `def test_name(` in it).
"""

from __future__ import annotations

import re

import pytest
from conftest import TIERS
from support.paths import REPO

ENTRIES = [(marker, prefix) for marker, prefixes in TIERS.items() for prefix in prefixes]


def test_every_tier_has_entries():
    assert {marker for marker, _ in ENTRIES} == {"slow", "faults", "conformance"}


@pytest.mark.parametrize(("marker", "prefix"), ENTRIES, ids=[p for _, p in ENTRIES])
def test_every_tier_entry_names_a_test_that_exists(marker: str, prefix: str):
    path, _, name = prefix.partition("::")
    target = REPO / path
    assert target.exists(), f"TIERS[{marker!r}] names {path}, which does not exist"
    if name:
        assert re.search(rf"^def {re.escape(name)}\(", target.read_text(), re.M), (
            f"TIERS[{marker!r}] names {prefix}, which is not defined there")
