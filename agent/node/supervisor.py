"""Runs this node's broker as a child process and keeps it running.

A broker that dies is restarted after a backoff that doubles up to a maximum and
resets once a broker stayed up for a while (like the kubelet's CrashLoopBackOff, one
level down). The broker's pid and local URI are written to the run directory for
the connect script, and removed when the broker is stopped on purpose.

The broker's stderr passes through the agent (so it still reaches the container log)
and its last error line is kept: a broker that exits says why in that line (a leader
whose journal is damaged names the file), and the operator should not have to find it
in the log. `exit_reason` ("broker exited with status 1: <line>") is what /readyz
answers while the broker is down and what the BrokerExited Event says.
"""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fluxnode.agent.broker.client import Client, ConnectError, RPCError
from fluxnode.agent.broker.message import NODEID_ANY
from fluxnode.agent.kube.backoff import Backoff
from fluxnode.agent.node.host_files import HostFiles
from fluxnode.agent.node.overlay_config import Placement

log = logging.getLogger("fluxnode.agent.supervisor")

STOP_GRACE = 10.0
RELOAD_CONNECT_WAIT = 10.0  # how long a just-started broker may take to open its local socket
STABLE_AFTER = 60.0  # a broker that ran this long is healthy: the next restart backoff starts over
TAIL_WAIT = 2.0  # how long an exited broker's last stderr lines may take to arrive
# The broker's log prefix ("2024-05-01T12:00:00 host broker[0]: ERROR "): a reason omits it.
_LOG_PREFIX = re.compile(r"^\S+ \S+ broker\[-?\d+\]: (?P<level>[A-Z]+) ")
_ERROR_LEVELS = ("CRITICAL", "ERROR")


class StderrTail:
    """Copies a broker's stderr to ours line by line and keeps its last error line."""

    def __init__(self, stream, sink=None) -> None:
        self.stream = stream
        self.sink = sink or sys.stderr
        self.last_line = ""
        self.last_error = ""
        self.thread = threading.Thread(target=self._run, name="broker-stderr", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for raw in iter(self.stream.readline, b""):
            line = raw.decode(errors="replace")
            try:
                self.sink.write(line)
                self.sink.flush()
            except (OSError, ValueError):
                pass
            text = line.strip()
            if not text:
                continue
            match = _LOG_PREFIX.match(text)
            message = text[match.end():] if match else text
            self.last_line = message
            if (match and match["level"] in _ERROR_LEVELS) or (
                not match and message.startswith(("fluxnode-broker:", "Error:"))
            ):
                self.last_error = message
        self.stream.close()

    def reason(self, timeout: float = TAIL_WAIT) -> str:
        """The line that says why the broker stopped (after its stderr closed, or `timeout`)."""
        self.thread.join(timeout)
        return self.last_error or self.last_line


class BrokerSupervisor:
    def __init__(
        self,
        files: HostFiles,
        node: str,
        state_dir: Path,
        backoff: Backoff,
        python: str = sys.executable,
        notify: Callable[[str, str, str], None] | None = None,
    ):
        self.files, self.node, self.state_dir, self.backoff = files, node, state_dir, backoff
        self.python = python
        self.notify = notify or (lambda reason, note, type_: None)
        self.proc: subprocess.Popen | None = None
        self.wanted = False
        self.placement: Placement | None = None
        self.started_at = 0.0
        self.next_start = 0.0
        self.starts = 0
        self.crashes = 0
        self.last_exit: int | None = None
        self.exit_reason: str | None = None  # why the last broker stopped by itself, until one runs
        self._tail: StderrTail | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.running and self.proc else None

    def command(self) -> list[str]:
        return [self.python, "-m", "fluxnode", "broker", "--config-path", str(self.files.config),
                "--hostname", self.node,
                "-S", f"rundir={self.files.run_dir}", "-S", f"local-uri={self.files.local_uri}",
                "-S", f"statedir={self.state_dir}"]

    def _start(self, placement: Placement) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self._tail = StderrTail(self.proc.stderr)
        self.placement = placement
        self.started_at = time.monotonic()
        self.starts += 1
        self.files.write_broker(self.proc.pid, self.files.local_uri)
        log.info("broker started: pid %d, rank %d", self.proc.pid, placement.rank)
        self.notify(
            "BrokerStarted", f"broker rank {placement.rank} started (pid {self.proc.pid})", "Normal"
        )

    def stop(self, why: str = "stopping", *, in_place: bool = False) -> None:
        """Stop the broker: SIGTERM (then SIGKILL after a grace period), or SIGKILL when
        ``in_place``.

        A broker stopped with SIGTERM shuts its whole subtree down first (as Flux does), which
        is right when the node leaves. To restart one broker with a new placement without
        taking its children down, it is killed instead: its children see the parent lost and
        rejoin the new one (the overlay supports that), and nothing below restarts.
        """
        proc, self.proc = self.proc, None
        self.placement = None
        self.exit_reason = None  # stopped on purpose: no failure to report
        self._tail = None
        self.files.clear_broker()
        if proc is None or proc.poll() is not None:
            return
        log.info("broker pid %d: %s", proc.pid, why)
        if in_place:
            proc.kill()
            proc.wait()
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            log.warning("broker pid %d did not stop in %.0fs, killing it", proc.pid, STOP_GRACE)
            proc.kill()
            proc.wait()

    def ensure(self, placement: Placement | None, *, reload: bool = True, why: str = "",
               stop_in_place: bool = False, config_changed: bool = False) -> None:
        """Make the broker run with ``placement`` (None: not running). Called on every reconcile.

        A new placement with the same rank is applied with ``config.reload`` (no restart) when
        the broker can; otherwise that one broker is restarted in place. ``config_changed``
        (broker.toml was rewritten) with an unchanged placement is also reloaded, so every
        broker knows the new size and hosts (for routing), but never restarts it.
        """
        self.wanted = placement is not None
        if placement is None:
            if self.proc is not None:
                self.stop(why or "node left the overlay", in_place=stop_in_place)
            return
        if self.running and self.placement == placement and config_changed and reload:
            self._reload()
        if self.running and self.placement != placement:
            if (
                placement.rank == (self.placement.rank if self.placement else None)
                and reload
                and self._reload()
            ):
                self.placement = placement
                return
            self.stop(
                f"placement changed to rank {placement.rank} (parent/children/size), restarting in "
                "place",
                in_place=True,
            )
            self.next_start = 0.0
        self.tick(placement)

    def _reload(self) -> bool:
        """Ask the running broker to re-read broker.toml (``config.reload``); False if it cannot."""
        # A broker that was just started may not listen yet (it may already have read the old
        # file): wait for its socket rather than restart it.
        deadline = time.monotonic() + RELOAD_CONNECT_WAIT
        try:
            while True:
                try:
                    client = Client.connect(self.files.local_uri, timeout=2.0)
                    break
                except ConnectError:
                    if not self.running or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.05)
            with client as c:
                c.rpc("config.reload", {}, nodeid=NODEID_ANY, timeout=5.0)
        except (ConnectError, RPCError, OSError) as exc:
            log.info("broker pid %d: config.reload not possible: %s", self.pid or 0, exc)
            return False
        log.info("broker pid %d reloaded its configuration", self.pid or 0)
        return True

    def tick(self, placement: Placement | None = None) -> float | None:
        """Restart a dead broker when its backoff expired; returns seconds until the next action."""
        placement = placement or self.placement
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            uptime = time.monotonic() - self.started_at
            self.proc = None
            self.files.clear_broker()
            self.crashes += 1
            self.last_exit = code
            line = self._tail.reason() if self._tail else ""
            self._tail = None
            self.exit_reason = f"broker exited with status {code}" + (f": {line}" if line else "")
            if uptime >= STABLE_AFTER:
                self.backoff.reset()
            delay = self.backoff.next_delay()
            self.next_start = time.monotonic() + delay
            log.warning("%s (after %.1fs); restarting in %.1fs", self.exit_reason, uptime, delay)
            self.notify("BrokerExited", f"{self.exit_reason} (after {uptime:.1f}s; restarting in "
                        f"{delay:.1f}s)", "Warning")
        if not self.wanted or self.running or placement is None:
            return None
        wait = self.next_start - time.monotonic()
        if wait > 0:
            self.placement = placement
            return wait
        self._start(placement)
        return None

    def describe(self) -> str:
        return (
            f"pid {self.pid}" if self.running else ("stopped" if not self.wanted else "restarting")
        )

