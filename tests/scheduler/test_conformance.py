"""Fluxion's own resource-query conformance corpus, run against `fluxnode resource-query`.

The floor below is the pass count this implementation reached; it must never be lowered
to make the test pass (raise it when more cases pass).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.paths import SHARED

CORPUS = SHARED / "fluxion-corpus"
PASS_FLOOR = 313


@pytest.mark.timeout(400)
def test_fluxion_corpus_pass_count():
    runner = CORPUS / "run_conformance.py"
    if not runner.exists():
        pytest.skip(f"conformance corpus not found at {CORPUS}")
    cmd = f"{sys.executable} -m fluxnode resource-query"
    proc = subprocess.run([sys.executable, str(runner), "--cmd", cmd, "--jobs", "2", "--json"],
                          cwd=CORPUS, capture_output=True, text=True, timeout=380)
    summary = json.loads(proc.stdout)
    passed = summary["passed"]
    total = summary["total"]
    print(f"\nFluxion conformance: {passed}/{total} passed")
    assert passed >= PASS_FLOOR
