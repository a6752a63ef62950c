"""One process `fluxnode exec` started on this broker's node (the local half of ``rexec``).

Like a flux-core subprocess started by the broker's exec service, the process is a direct
child of the broker, runs as the broker's user in its own process group (so a signal
reaches whatever it started too), and its stdout and stderr are read on the broker's one
event loop. Why a window: the broker reads a pipe only while fewer than `window` bytes of
its output wait to be passed on (`held`); past that it stops polling the pipe, the pipe
fills and the process blocks in write(2). So a process that writes faster than the reader
at the other end of the tree consumes cannot make this broker hold more than one window.

Its exit is seen through a pidfd (no SIGCHLD handler in the broker), and reported only
once both pipes reached end of file, so the exit comes after the last byte of output.

Output is carried as RFC 24-style data: a UTF-8 string when the bytes are valid UTF-8,
base64 otherwise (`encode_data` / `decode_data`); a chunk's cost in the window is the
length of that string.
"""

from __future__ import annotations

import base64
import errno
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.reactor import Reactor

if TYPE_CHECKING:
    import subprocess

READ_CHUNK = 64 * 1024  # bytes read from a pipe at once


@dataclass(frozen=True)
class CommandSpec:
    """What to run: argv, the whole environment, the working directory (None: the broker's)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None


def encode_data(raw: bytes) -> dict:
    """Output bytes as a JSON-safe dict: ``{"data": str}`` or base64 with ``encoding``."""
    try:
        return {"data": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"data": base64.b64encode(raw).decode("ascii"), "encoding": "base64"}


def decode_data(event: dict) -> bytes:
    data = event.get("data", "")
    if event.get("encoding") == "base64":
        return base64.b64decode(data)
    return data.encode("utf-8")


def cost(event: dict) -> int:
    """What an event counts against a window: the length of its output data (control
    events such as exits count nothing: there are at most a few per rank)."""
    return len(event["data"]) if event.get("type") == "output" else 0


class LocalProcess:
    """A started process; `sink(event)` gets its events in order (started, output, exit)."""

    def __init__(self, reactor: Reactor, rank: int, spec: CommandSpec, *, with_stdin: bool,
                 window: int, sink: Callable[[dict], None], on_done: Callable[[], None]) -> None:
        self.reactor = reactor
        self.rank = rank
        self.spec = spec
        self.with_stdin = with_stdin
        self.window = window
        self.sink = sink
        self.on_done = on_done
        self.proc: subprocess.Popen | None = None
        self.held = 0  # bytes of output read and not yet passed on
        self._out: dict[int, str] = {}  # open output fds -> stream name
        self._paused = False
        self._pidfd: int | None = None
        self.returncode: int | None = None
        self._stdin_fd: int | None = None
        self._stdin_buf = bytearray()
        self._stdin_eof = False
        self._stdin_waiters: list[Callable[[], None]] = []
        self._stdin_polled = False
        self.done = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        """Start it; OSError (no such command, directory, permission) if it cannot be."""
        # subprocess is imported by the first process a broker starts, not by every broker
        # at start (issue 32: a worker's memory)
        import subprocess

        self.proc = subprocess.Popen(
            self.spec.argv, cwd=self.spec.cwd, env=self.spec.env,
            stdin=subprocess.PIPE if self.with_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0, close_fds=True,
        )
        for name in ("stdout", "stderr"):
            pipe = getattr(self.proc, name)
            fd = os.dup(pipe.fileno())
            pipe.close()
            os.set_blocking(fd, False)
            self._out[fd] = name
            self.reactor.add(fd, zmq.POLLIN, lambda _ev, fd=fd: self._read(fd))
        if self.proc.stdin is not None:
            self._stdin_fd = os.dup(self.proc.stdin.fileno())
            self.proc.stdin.close()
            os.set_blocking(self._stdin_fd, False)
        self._pidfd = os.pidfd_open(self.proc.pid)
        self.reactor.add(self._pidfd, zmq.POLLIN, lambda _ev: self._exited())

    # -- output ----------------------------------------------------------------------------
    def _read(self, fd: int) -> None:
        room = self.window - self.held
        if room <= 0:
            self._pause()
            return
        try:
            raw = os.read(fd, min(READ_CHUNK, room))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            raw = b""
        if not raw:
            self.reactor.remove(fd)
            os.close(fd)
            del self._out[fd]
            self._maybe_done()
            return
        event = {"rank": self.rank, "type": "output", "stream": self._out[fd],
                 **encode_data(raw)}
        self.held += cost(event)
        if self.held >= self.window:
            self._pause()
        self.sink(event)

    def _pause(self) -> None:
        if not self._paused:
            self._paused = True
            for fd in self._out:
                self.reactor.modify(fd, 0)

    def release(self, n: int) -> None:
        """`n` bytes of output were passed on: read again if that makes room."""
        self.held -= n
        if self._paused and self.held < self.window:
            self._paused = False
            for fd in self._out:
                self.reactor.modify(fd, zmq.POLLIN)

    # -- stdin -----------------------------------------------------------------------------
    def write(self, data: bytes, eof: bool, done: Callable[[], None]) -> None:
        """Queue stdin bytes (and maybe its end); `done()` once the pipe took them (or the
        process no longer reads stdin)."""
        if self._stdin_fd is None:
            done()
            return
        self._stdin_buf += data
        self._stdin_eof = self._stdin_eof or eof
        self._stdin_waiters.append(done)
        self._flush_stdin()

    def _flush_stdin(self) -> None:
        fd = self._stdin_fd
        if fd is None:
            return
        while self._stdin_buf:
            try:
                n = os.write(fd, self._stdin_buf)
            except (BlockingIOError, InterruptedError):
                if not self._stdin_polled:
                    self._stdin_polled = True
                    self.reactor.add(fd, zmq.POLLOUT, lambda _ev: self._flush_stdin())
                return
            except OSError:  # EPIPE: it closed its stdin or exited
                self._stdin_buf.clear()
                self._stdin_eof = True
                break
            del self._stdin_buf[:n]
        if self._stdin_polled:
            self._stdin_polled = False
            self.reactor.remove(fd)
        if self._stdin_eof:
            os.close(fd)
            self._stdin_fd = None
        waiters, self._stdin_waiters = self._stdin_waiters, []
        for done in waiters:
            done()

    # -- signals and exit ------------------------------------------------------------------
    def kill(self, signum: int) -> None:
        if self.proc is None or self.returncode is not None:
            return
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(self.proc.pid, signum)

    def _exited(self) -> None:
        assert self.proc is not None and self._pidfd is not None
        self.returncode = self.proc.wait()
        self.reactor.remove(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = None
        if self._stdin_fd is not None:
            self._stdin_buf.clear()
            self._stdin_eof = True
            self._flush_stdin()
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.done or self._out or self.returncode is None:
            return
        self.done = True
        rc = self.returncode
        event: dict = {"rank": self.rank, "type": "exit"}
        if rc < 0:
            event["signal"] = -rc
        else:
            event["status"] = rc
        self.sink(event)
        self.on_done()

    def close(self) -> None:
        """The broker is going away: kill the process, let go of its descriptors."""
        self.kill(signal.SIGKILL)
        for fd in list(self._out):
            self.reactor.remove(fd)
            os.close(fd)
        self._out.clear()
        for fd in (self._stdin_fd, self._pidfd):
            if fd is not None:
                self.reactor.remove(fd)  # (a no-op for a descriptor it does not watch)
                os.close(fd)
        self._stdin_fd = self._pidfd = None
        if self.proc is not None:
            import subprocess

            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass


def spawn_error(exc: OSError, argv0: str) -> tuple[int, str]:
    """(errnum, text) for a process that could not be started (the file named unless it is
    the command itself, which the client names anyway)."""
    errnum = exc.errno or errno.EIO
    what = exc.filename if exc.filename not in (None, argv0) else ""
    text = f"{what}: {exc.strerror}" if what else (exc.strerror or str(exc))
    return errnum, text
