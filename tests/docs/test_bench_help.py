"""Every benchmark script answers `--help` with its usage and exit status 0.

The docs point readers at `bench/<name>.py --help`; a script that parses its own
arguments by hand crashes on it (`int('--help')`) instead.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO as ROOT

# A script has a `__main__` block; the other files (sched_common.py, binder_sim_nodes.py)
# are helpers the scripts import.
SCRIPTS = sorted(
    p for p in (ROOT / "bench").glob("*.py") if '__name__ == "__main__"' in p.read_text()
)


def test_there_are_bench_scripts():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_bench_script_help_exits_0(script: Path):
    done = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout
