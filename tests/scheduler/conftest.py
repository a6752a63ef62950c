"""Fixtures for the scheduler library tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.sched_graphs import TINY_GRUG


@pytest.fixture
def tiny_grug(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.graphml"
    p.write_text(TINY_GRUG)
    return p
