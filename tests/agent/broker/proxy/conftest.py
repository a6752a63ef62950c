"""Fixtures for the proxy tests: a real sshd on loopback and a Unix-socket echo server."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
from pathlib import Path

import pytest
from support.accept_loop import AcceptLoop
from support.sshd import SSHServer, ensure_sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    reason = ensure_sshd()
    if reason:
        pytest.skip(reason)
    with SSHServer(tmp_path_factory.mktemp("sshd")) as server:
        yield server


class EchoServer:
    """A Unix-socket server that echoes every byte back, one thread per connection."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="fluxnode-echo-")
        self.path = os.path.join(self.dir, "echo.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(64)
        self.loop = AcceptLoop(self.sock, self._echo)

    @property
    def connections(self) -> int:
        return self.loop.connections

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def ssh_env(tmp_path, sshd):
    """Environment for `fluxnode proxy` subprocesses: isolated HOME, no agent, test relay
    command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SSH_", "FLUXNODE_"))}
    home = tmp_path / "home"
    home.mkdir()
    env.update(
        HOME=str(home),
        FLUXNODE_SSH_RCMD=f"{sys.executable} -m fluxnode relay",
        FLUXNODE_SSH_KNOWN_HOSTS=str(sshd.known_hosts),
        FLUXNODE_SSH_IDENTITY=str(sshd.identity),
    )
    return env


CLIENT = Path(__file__).with_name("echo_client.py")
