"""Running a command against a broker socket, local or behind ssh (the library of `fluxnode proxy`).

* ``local:///PATH`` -- check that a broker listens at PATH, then run the command with
  ``FLUXNODE_URI`` set to it (`check_socket`, `run_command`).
* ``ssh://[user@]host[:port]/PATH`` -- parsed here into an `SSHTarget`; the SSH tunnel
  that serves it as a private local socket is ssh_tunnel.py.
* `relay_stdio` is the remote end of that tunnel (`fluxnode relay`): it copies its
  stdin/stdout to the broker socket, one process per proxied connection.

Every failure is a `ProxyError` whose text is the one line the user sees.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn
from urllib.parse import urlsplit

CHUNK = 64 * 1024
DEFAULT_RCMD = "fluxnode relay"
CONNECT_TIMEOUT = 15.0


class ProxyError(Exception):
    """A proxy failure explained in one line (bad URI, host, auth, remote socket ...)."""


@dataclass(frozen=True)
class SSHTarget:
    host: str
    port: int | None
    user: str | None
    path: str

    @property
    def display(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"ssh://{user}{self.host}{port}{self.path}"


def _local_path(uri: str) -> str:
    path = uri[len("local://"):]
    if not path.startswith("/"):
        raise ProxyError(f"{uri}: local:// needs an absolute socket path, e.g. local:///run/fluxnode/local")
    return path


def parse_uri(uri: str) -> str | SSHTarget:
    """A local socket path for ``local://``, or an SSHTarget for ``ssh://``."""
    if uri.startswith("local://"):
        return _local_path(uri)
    if uri.startswith("ssh://"):
        try:
            parts = urlsplit(uri)
            port = parts.port
        except ValueError as exc:
            raise ProxyError(f"{uri}: bad ssh URI: {exc}") from None
        if not parts.hostname:
            raise ProxyError(f"{uri}: no host (expected ssh://[user@]host[:port]/path)")
        if not parts.path or parts.path == "/":
            raise ProxyError(f"{uri}: no socket path (expected ssh://[user@]host[:port]/path)")
        if parts.query or parts.fragment:
            raise ProxyError(f"{uri}: unexpected '?' or '#' in ssh URI")
        return SSHTarget(host=parts.hostname, port=port, user=parts.username, path=parts.path)
    scheme = uri.split("://", 1)[0] if "://" in uri else uri
    raise ProxyError(f"{uri}: unsupported URI scheme {scheme!r} (use local:///PATH or ssh://[user@]host[:port]/PATH)")


def check_socket(path: str) -> None:
    """Fail unless something accepts connections on the Unix socket at `path`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ProxyError(f"no broker socket at {path} (is the broker running?)") from None
    except OSError as exc:
        raise ProxyError(f"cannot access {path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise ProxyError(f"{path} is not a Unix socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(CONNECT_TIMEOUT)
        try:
            s.connect(path)
        except OSError as exc:
            raise ProxyError(f"cannot connect to {path}: {exc.strerror or exc}") from None


def run_command(command: Sequence[str], uri: str) -> int:
    """Run `command` (or $SHELL) with FLUXNODE_URI=`uri`; return its exit status (128+N if
    signaled)."""
    argv = list(command) or [os.environ.get("SHELL") or "/bin/sh"]
    env = dict(os.environ, FLUXNODE_URI=uri)
    try:
        proc = subprocess.Popen(argv, env=env)
    except FileNotFoundError:
        raise ProxyError(f"{argv[0]}: command not found") from None
    except PermissionError:
        raise ProxyError(f"{argv[0]}: permission denied") from None
    # Pass SIGTERM/SIGHUP on to the command and keep running until it exits, so the
    # tunnel and its private directory are always cleaned up.
    forwarded = (signal.SIGTERM, signal.SIGHUP)
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))
        for sig in forwarded
    }
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:
                continue  # the child got the SIGINT too; wait for it to decide
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - rc if rc < 0 else rc


def relay_stdio(path: str) -> NoReturn:
    """Copy stdin to the broker socket at `path` and the socket to stdout, then exit the process."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        raise ProxyError(f"cannot connect to {path}: {exc.strerror or exc}") from None
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    def upstream() -> None:
        try:
            while True:
                data = os.read(0, CHUNK)
                if not data:
                    break
                sock.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=upstream, name="relay-up", daemon=True).start()
    try:
        while True:
            data = sock.recv(CHUNK)
            if not data:
                break
            view = memoryview(data)
            while view:
                n = os.write(1, view)
                view = view[n:]
    except OSError:
        pass
    sys.stdout.flush()
    os._exit(0)  # the stdin reader may still be blocked; nothing else needs to run
