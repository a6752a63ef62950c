"""The visit counts ``resource-query -e`` prints, when the exhaustive policies reuse a
subtree's outcome (issue 35; flux-sched's t3029-resource-prune.t, tests 1-4): a subtree
taken from the cache counts the visits its walk made, as Fluxion's walk, which has no
such cache, makes them again.

Each expected list is the one the t3029 script compares against (its ``cmp01``..
``cmp04`` here-documents), with its command files, graph and options.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.paths import SHARED

DATA = SHARED / "fluxion-corpus" / "data" / "resource"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"corpus data not found at {DATA}")

# (t3029 test, commands file, extra options, (preorder, postorder) per match)
CASES = [
    (1, "cmds01.in", [], [(100, 80), (77, 61), (52, 41), (29, 22)]),
    (2, "cmds02.in", [], [(100, 84), (100, 81), (100, 77), (100, 74)]),
    (3, "cmds02.in", ["-p", "ALL:gpu"], [(100, 84), (77, 64), (52, 43), (29, 23)]),
    (4, "cmds03.in", [], [(100, 80), (77, 61), (54, 42), (29, 22)]),
]


@pytest.mark.parametrize(("test", "cmds", "extra", "counts"), CASES,
                         ids=[f"t3029-{c[0]}" for c in CASES])
def test_visit_counts_under_high_with_pruning(tmp_path, test, cmds, extra, counts):
    text = (DATA / "commands" / "pruning" / cmds).read_text().replace(
        "@TEST_SRCDIR@", str(DATA.parent.parent))
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L",
         str(DATA / "grugs" / "tiny.graphml"), "-S", "CA", "-P", "high", *extra,
         "-t", str(tmp_path / "out.R"), "-e"],
        input=text, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = [int(line.rsplit("=", 1)[1]) for line in proc.stdout.splitlines()
           if "ORDER VISIT COUNT=" in line]
    assert got == [n for pair in counts for n in pair]
