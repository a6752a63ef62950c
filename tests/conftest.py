"""Fixtures shared by every area (a Kubernetes API emulator per test, reached by the real
client), and the test tiers.

Tiers: `make test` runs every test; `make check`, the tier a developer runs before each
commit, leaves out the tests marked `slow`, `faults` or `conformance`. The marks are given
here, by file or test, in one table (TIERS), rather than in each file, so that the tiers
can be read and rebalanced in one place; `pytest -m conformance` and the like select a
tier. A conformance test whose corpus in ../shared is missing is skipped and named in the
summary, so a run without the corpora never reads as one that passed them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.paths import SHARED

from fluxnode.testing.kube_emulator import KubeEmulator

# marker -> node id prefixes (a file, or a file::test) that carry it
TIERS: dict[str, tuple[str, ...]] = {
    # Fluxion's corpora in ../shared
    "conformance": (
        "tests/scheduler/test_conformance.py",
        "tests/scheduler/jobspec/test_corpus.py",
        "tests/scheduler/graph/test_path_index.py",
        "tests/scheduler/traversers/test_templates.py",
    ),
    # seeded kill -9 schedules with the invariant checker
    "faults": (
        "tests/faults/",
    ),
    # the rest of the slowest tests (pytest --durations on the whole suite)
    "slow": (
    ),
}
CORPORA = (SHARED / "fluxion-corpus", SHARED / "fluxion-random")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, prefixes in TIERS.items():
            if item.nodeid.startswith(prefixes):
                item.add_marker(marker)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    missing = [str(path) for path in CORPORA if not path.is_dir()]
    if not missing:
        return
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "conformance" in r.keywords]
    terminalreporter.write_sep("=", "Fluxion's corpora are missing", yellow=True)
    terminalreporter.write_line(
        f"not found: {', '.join(missing)}; {len(skipped)} conformance tests did not run "
        "(they need ../shared beside the checkout)")


def pytest_report_header(config) -> str:
    from support.kubectl import kubectl_path, kubectl_version

    return f"kubectl: {kubectl_version()} ({kubectl_path() or 'not installed: make system-deps'})"


@pytest.fixture
def kube(tmp_path) -> Iterator[KubeEmulator]:
    with KubeEmulator(
        directory=tmp_path / "kube", namespaces=("default", "kube-system", "fluxnode")
    ) as emulator:
        yield emulator


@pytest.fixture
def core(kube):
    from kubernetes import client

    api_client = kube.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()
