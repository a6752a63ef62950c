"""The API emulator with its Job controller running, for the Job controller's own tests.

    with job_emulator(tmp_path, job_backoff=1.0) as kube: ...

Options go to `KubeEmulator` (e.g. ``job_backoff``/``job_max_backoff``: the pod failure
backoff, the real controller's 10 s and 6 min unless a test lowers them). On the way out it
asserts the controller met no error of its own: a sync that raised is a failure of the test
even when what the test looked at came out right."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from fluxnode.testing.kube_emulator import KubeEmulator


@contextlib.contextmanager
def job_emulator(tmp_path: Path, **options: object) -> Iterator[KubeEmulator]:
    with KubeEmulator(directory=tmp_path / "kube", job_controller=True,
                      **options) as emulator:  # type: ignore[arg-type]
        yield emulator
        assert emulator.job_controller is not None and emulator.job_controller.errors == []


def job_pods(kube: KubeEmulator, job: str) -> list[dict]:
    """The pods of Job `job` in namespace default, by the label the controller gives them."""
    return kube.list("pods", "default", label_selector=f"batch.kubernetes.io/job-name={job}")


def job_status(kube: KubeEmulator, job: str) -> dict:
    """Job `job`'s status as stored ({} before the controller wrote one)."""
    return kube.get("jobs.batch", job, "default").get("status") or {}
