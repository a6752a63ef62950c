"""bench/placements.py as a module, and the records it made (tests/data/placements/), for
the tests that replay a record on the current code and compare it step by step."""

from __future__ import annotations

import importlib.util
import json
import sys

from support.paths import REPO

RECORDS = REPO / "tests" / "data" / "placements"


def _bench():
    if str(REPO / "bench") not in sys.path:  # its imports of other bench scripts
        sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("placements", REPO / "bench" / "placements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench()


def recorded(name: str) -> dict:
    """tests/data/placements/NAME.json as read."""
    return json.loads((RECORDS / f"{name}.json").read_text())


def assert_same_steps(policy: str, got: list[dict], want: list[dict]) -> None:
    """Each step of a replay equal to the record's, naming the first that is not."""
    assert len(got) == len(want), f"{policy}: {len(got)} steps, the record has {len(want)}"
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"{policy}: step {step} differs from the record"
