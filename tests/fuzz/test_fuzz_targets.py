"""Each fuzz target runs a little in the suite, so its harness cannot rot; `make fuzz` runs
them for as long as asked (tests/fuzz/README.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

HERE = Path(__file__).parent
TARGETS = sorted(p.name for p in HERE.glob("fuzz_*.py"))


@pytest.mark.parametrize("target", TARGETS)
def test_target_runs_without_findings(tmp_path, target):
    corpus = tmp_path / "corpus"
    out = subprocess.run(
        [sys.executable, str(HERE / target), "-runs=3000", "-seed=1", str(corpus)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Done 3000 runs" in out.stderr, out.stderr[-2000:]
    assert any(corpus.iterdir())  # seeded
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*"))
