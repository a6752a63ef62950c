"""Output that cannot be written is one line and exit 1, never a traceback. (A reader that
went away, as `| head` does, is click's own quiet exit 1.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

FLUXNODE = [sys.executable, "-m", "fluxnode"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("args", [("--help",), ("config", "render", "--hosts", "a"),
                                  ("config", "topology", "--topo", "kary:2", "--size", "3")],
                         ids=" ".join)
def test_a_full_disk_is_one_line(args):
    with open("/dev/full", "w") as full:
        r = subprocess.run([*FLUXNODE, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    assert (r.returncode, r.stderr) == (1, "Error: No space left on device\n")

