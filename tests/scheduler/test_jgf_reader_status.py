"""The JGF reader takes a vertex's "status" as Fluxion's does: an int, the value of
resource_pool_t::status_t (UP 0, DOWN 1), so a graph written with a vertex down loads
with it down (flux-sched t3025 test 21, "setting vertex down in JGF same as
set-status", which fluxnode failed before)."""

from __future__ import annotations

import pytest
from fluxnode.scheduler.readers.jgf import read_jgf


def _doc(status) -> dict:
    core = {"type": "core", "id": 0, "uniq_id": 1, "rank": -1,
            "paths": {"containment": "/c0/core0"}}
    if status is not None:
        core["status"] = status
    return {"graph": {"nodes": [
        {"id": "0", "metadata": {"type": "cluster", "basename": "c", "id": 0, "uniq_id": 0,
                                 "rank": -1, "paths": {"containment": "/c0"}}},
        {"id": "1", "metadata": core}],
        "edges": [{"source": "0", "target": "1"}]}}


@pytest.mark.parametrize(("status", "want"), [(1, "down"), (0, "up"), (None, "up"),
                                              ("down", "down")])
def test_status_is_fluxions_enum(status, want):
    g = read_jgf(_doc(status))
    assert g.lookup("/c0/core0")[0].status == want
