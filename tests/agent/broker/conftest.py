import os
import sys
from pathlib import Path

import pytest

from fluxnode.testing.instance import Instance

FLUXNODE = [sys.executable, "-m", "fluxnode"]
MODULES_DIR = str(Path(__file__).parent / "modules")


@pytest.fixture(scope="module")
def inst8(tmp_path_factory):
    """An 8-broker kary:2 instance (depth 3: 0 -> 1 -> 3 -> 7), shared by read-only tests."""
    resources = {f"node{i}": {"cores": i + 1, "gpus": i % 2} for i in range(8)}
    with Instance(
        8,
        tmp_path_factory.mktemp("inst8"),
        resources=resources,
        modules="overlay_testmod",
        env={"PYTHONPATH": MODULES_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")},
    ) as inst:
        yield inst


def cli_env(inst: Instance) -> dict[str, str]:
    return {**os.environ, "FLUXNODE_URI": inst.uri}
