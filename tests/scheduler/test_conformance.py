"""Fluxion's resource-query conformance corpora, run against `fluxnode resource-query`: its
own hand-made cases (`fluxion-corpus`) and about 2,000 randomly generated ones with Fluxion's
outputs (`fluxion-random`).

The floors below are the pass counts this implementation reached; they must never be lowered
to make the test pass (raise them when more cases pass).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.paths import SHARED

CORPUS = SHARED / "fluxion-corpus"
PASS_FLOOR = 314
RANDOM = SHARED / "fluxion-random"
RANDOM_PASS_FLOOR = 2014


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


@pytest.mark.timeout(900)
def test_fluxion_random_pass_count():
    runner = CORPUS / "run_conformance.py"
    manifest = RANDOM / "cases.jsonl"
    if not runner.exists() or not manifest.exists():
        pytest.skip(f"random conformance corpus not found at {RANDOM}")
    cmd = f"{sys.executable} -m fluxnode resource-query"
    proc = subprocess.run([sys.executable, str(runner), "--manifest", str(manifest), "--root",
                           str(RANDOM), "--cmd", cmd, "--jobs", "2", "--json"],
                          cwd=RANDOM, capture_output=True, text=True, timeout=880)
    summary = json.loads(proc.stdout)
    passed, total = summary["passed"], summary["total"]
    # every case exits 0 with Fluxion; a non-zero exit here is a crash, never an answer
    crashed = [c["id"] for c in summary["cases"] if "exit status" in (c.get("detail") or "")]
    print(f"\nFluxion random conformance: {passed}/{total} passed")
    assert not crashed, f"resource-query crashed on {crashed[:5]}"
    assert passed >= RANDOM_PASS_FLOOR
