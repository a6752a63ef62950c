"""Watch processes exit from the outside, in order, through pidfds.

A pidfd names one process for good (no pid reuse) and becomes readable when that process
exits, whoever its parent is, so a test can see the brokers `fluxnode start` forked
leave one by one without asking them or their launcher.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Hashable


class ExitWatcher:
    """Record, for each watched process, the poll round in which it was first seen gone.

    A process seen in an earlier round exited before one seen in a later round; two seen
    in the same round exited too close together to tell apart.
    """

    def __init__(self, pids: dict[Hashable, int]) -> None:
        self.pids = dict(pids)
        self.fds: dict[Hashable, int] = {}
        self.exited: dict[Hashable, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        for key, pid in self.pids.items():
            try:
                self.fds[key] = os.pidfd_open(pid)
            except ProcessLookupError:
                self.exited[key] = (0, time.monotonic())
        self._thread = threading.Thread(target=self._run, name="exit-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        by_fd = {fd: key for key, fd in self.fds.items()}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        round_ = 0
        while by_fd and not self._stop.is_set():
            ready = poller.poll(50)
            if not ready:
                continue
            now = time.monotonic()
            round_ += 1
            with self._lock:
                for fd, _ in ready:
                    poller.unregister(fd)
                    self.exited[by_fd.pop(fd)] = (round_, now)

    def alive(self, key: Hashable) -> bool:
        with self._lock:
            return key not in self.exited

    def running(self) -> list[Hashable]:
        with self._lock:
            return [k for k in self.pids if k not in self.exited]

    def wait(self, timeout: float) -> bool:
        """True once every watched process has exited (False at the timeout)."""
        deadline = time.monotonic() + timeout
        while self.running():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def kill(self, key: Hashable, sig: int = signal.SIGKILL) -> None:
        """Signal the process itself (never whatever now has its old pid)."""
        fd = self.fds.get(key)
        if fd is not None and self.alive(key):
            try:
                signal.pidfd_send_signal(fd, sig)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1)
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM `proc` and reap it; SIGKILL it if it is still there after `timeout` seconds
    (a bench or a test must never leave a broker or a binder behind)."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
