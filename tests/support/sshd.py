"""A real OpenSSH server on 127.0.0.1 for tests (owner: conf).

    with SSHServer(tmp_path) as sshd:
        sshd.port, sshd.user, sshd.identity, sshd.known_hosts

`/usr/sbin/sshd -D -e -f <generated config>` listens on a loopback port from
`fluxnode.testing.ports` (sshd cannot be asked to bind port 0 and say which) with its own
host key; a fresh user key is authorized for the current user (StrictModes off, root
allowed with keys only). If sshd is missing and we are root, `ensure_sshd()` installs
openssh-server with apt-get; otherwise the caller should skip with the returned reason.
The server is killed at exit, even if the test fails.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from fluxnode.testing.ports import free_port
from fluxnode.testing.waiting import wait_for

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
        self.proc: subprocess.Popen | None = None
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.identity = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.log_path = self.dir / "sshd.log"

    def _write_config(self) -> Path:
        conf = self.dir / "sshd_config"
        conf.write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.host_key}\n"
            f"PidFile {self.dir}/sshd.pid\n"
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
            "MaxStartups 100:30:200\n"
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
        # The port is this worker's own, outside the kernel's ephemeral range
        # (fluxnode.testing.ports): no other worker's process and no bind(0) or connect()
        # takes it. The retry stays for what the allocator cannot see: another pytest session
        # on this machine (its gw0 has the same block) binding the same port between the
        # allocator's probe and sshd's bind.
        for _attempt in range(5):
            self.port = free_port()
            conf = self._write_config()
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(conf)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            log.close()
            try:
                wait_for(self._ready, timeout=15, what=f"sshd on 127.0.0.1:{self.port}")
                break
            except TimeoutError:
                self.stop()
                if "Address already in use" not in self.log():
                    raise RuntimeError(f"sshd did not start: {self.log()[-2000:]}") from None
        else:
            raise RuntimeError(f"sshd could not find a free port: {self.log()[-2000:]}")
        pub = (self.dir / "ssh_host_ed25519_key.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n")
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise TimeoutError(f"sshd exited with {self.proc.returncode}")
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            return s.recv(64).startswith(b"SSH-2.0-")

    def uri(self, path: str) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{path}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # sshd and any session children it forked
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> SSHServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
