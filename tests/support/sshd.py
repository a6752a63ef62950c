"""A real OpenSSH server on 127.0.0.1 for tests (owner: conf).

    with SSHServer(tmp_path) as sshd:
        sshd.port, sshd.user, sshd.identity, sshd.known_hosts

The test process listens on a loopback port the kernel picks (port 0: nothing else can
hold it or take it between a probe and a bind) and hands each connection it accepts to
`/usr/sbin/sshd -i -e -f <generated config>`, OpenSSH's inetd mode: the real server, one
process per connection, speaking on the accepted socket (sshd itself cannot be asked to
bind port 0 and say which, and a port chosen for it beforehand can be taken by another
pytest session on the machine first). Its own host key; a fresh user key is authorized for
the current user (StrictModes off, root allowed with keys only). If sshd is missing and we
are root, `ensure_sshd()` installs openssh-server with apt-get; otherwise the caller should
skip with the returned reason. Every sshd it started is killed at exit, even if the test
fails.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from fluxnode.testing.waiting import wait_for
from support.accept_loop import AcceptLoop

SSHD = Path("/usr/sbin/sshd")


def ensure_sshd() -> str | None:
    """Return None when sshd and ssh-keygen are usable, else why not (for pytest.skip)."""
    if SSHD.exists() and shutil.which("ssh-keygen"):
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return (
            "sshd is not installed (install openssh-server, "
            "or run the tests as root with apt-get available)"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "openssh-server"],
    ):
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            failure = r.stderr.strip()[-200:]
            return f"cannot install openssh-server ({' '.join(argv)} failed: {failure})"
    if not SSHD.exists():
        return "openssh-server installed but /usr/sbin/sshd is missing"
    return None


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=60)


class SSHServer:
    def __init__(self, tmp_path: Path, user: str | None = None) -> None:
        self.dir = Path(tmp_path) / f"sshd-{os.getpid()}-{time.monotonic_ns()}"
        self.user = user or getpass.getuser()
        self.port = 0
        self.config = self.dir / "sshd_config"
        self.listener: socket.socket | None = None
        self.loop: AcceptLoop | None = None
        self.procs: list[subprocess.Popen] = []  # one sshd per connection accepted
        self._lock = threading.Lock()
        self._stopping = False
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.identity = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.log_path = self.dir / "sshd.log"

    def _write_config(self) -> Path:
        conf = self.dir / "sshd_config"
        conf.write_text(
            f"HostKey {self.host_key}\n"
            f"AuthorizedKeysFile {self.dir}/authorized_keys\n"
            "StrictModes no\n"
            "PermitRootLogin prohibit-password\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "AllowTcpForwarding no\n"
            "AllowAgentForwarding no\n"
            "X11Forwarding no\n"
            "PrintMotd no\n"
            "PrintLastLog no\n"
            "MaxSessions 100\n"
            "LogLevel VERBOSE\n"
        )
        return conf

    def start(self) -> SSHServer:
        self.dir.mkdir(parents=True, mode=0o700)
        _keygen(self.host_key, "fluxnode-test-host")
        _keygen(self.identity, "fluxnode-test-user")
        (self.dir / "authorized_keys").write_text((self.dir / "id_ed25519.pub").read_text())
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        self.config = self._write_config()
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.listener.getsockname()[1]
        self.loop = AcceptLoop(self.listener, self._serve)
        pub = (self.dir / "ssh_host_ed25519_key.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n")
        # one connection through, so that a config or key sshd refuses fails here, naming why
        wait_for(self._ready, timeout=15, what=f"sshd on 127.0.0.1:{self.port}")
        return self

    def _serve(self, conn: socket.socket) -> None:
        """(The accept loop's thread for `conn`.) An sshd in inetd mode for this one
        connection: its stdin and stdout are the socket, its log lines go to sshd.log."""
        with conn, open(self.log_path, "ab") as log, self._lock:
            if self._stopping:  # accepted as the listener closed: no sshd for it
                return
            self.procs.append(subprocess.Popen(
                [str(SSHD), "-i", "-e", "-f", str(self.config)],
                stdin=conn, stdout=conn, stderr=log, start_new_session=True))

    def _ready(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            banner = s.recv(64)
        if not banner.startswith(b"SSH-2.0-"):
            raise RuntimeError(f"sshd did not start: {self.log()[-2000:]}")
        return True

    def uri(self, path: str) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{path}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop accepting, then end every sshd started, and any session child it forked."""
        if self.listener is None:
            return
        with self._lock:
            self._stopping = True
            with contextlib.suppress(OSError):  # wakes the accept loop (close alone does not)
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            procs, self.procs = self.procs, []
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self.loop is not None:
            self.loop.thread.join(timeout=10)
        self.listener = None

    def __enter__(self) -> SSHServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
