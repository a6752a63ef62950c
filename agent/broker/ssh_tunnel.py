"""The ssh:// side of `fluxnode proxy`: one SSH connection serving a private Unix socket.

An SSH connection (paramiko) is opened once; a private Unix socket is created in a
fresh 0700 directory, and every connection to it gets its own SSH exec channel running
``fluxnode relay PATH`` on the remote host (override with ``FLUXNODE_SSH_RCMD``, like
flux's ``FLUX_SSH_RCMD``). Bytes are copied both ways unchanged, so the protocol is
whatever the broker speaks.

Host keys are checked like OpenSSH's default: keys come from ``/etc/ssh/ssh_known_hosts``
and ``~/.ssh/known_hosts`` (or `known_hosts`/``FLUXNODE_SSH_KNOWN_HOSTS``); an unknown
host is refused unless `accept_new`, which records the key like
``StrictHostKeyChecking=accept-new``. A *changed* key is always refused. Authentication
tries the given identities, the SSH agent and ``~/.ssh/id_*``; ``~/.ssh/config``
HostName/User/Port/IdentityFile are honored.

Kept apart from proxy.py because paramiko takes ~170 ms to import, and `fluxnode relay`,
which runs once per proxied connection on the remote host, needs none of it.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import selectors
import shlex
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import paramiko
from fluxnode.agent.broker.proxy import CHUNK, CONNECT_TIMEOUT, DEFAULT_RCMD, ProxyError, SSHTarget


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _known_hosts_file(option: str | None) -> Path:
    return Path(
        option or os.environ.get("FLUXNODE_SSH_KNOWN_HOSTS") or Path.home() / ".ssh" / "known_hosts"
    )


def _host_key_label(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class Tunnel:
    """One SSH connection that serves a private Unix socket by relaying to a remote socket."""

    def __init__(
        self,
        target: SSHTarget,
        *,
        identities: Sequence[str] = (),
        known_hosts: str | None = None,
        accept_new: bool = False,
        rcmd: str | None = None,
        report: Callable[[str], None] = _to_stderr,
    ) -> None:
        self.target = target
        self.identities = list(identities)
        self.known_hosts = _known_hosts_file(known_hosts)
        self.accept_new = accept_new
        self.rcmd = rcmd or os.environ.get("FLUXNODE_SSH_RCMD") or DEFAULT_RCMD
        self.report = (
            report  # one line for the user, from any thread (a new host key, a failed relay)
        )
        self.client = None
        self.tmpdir: str | None = None
        self.socket_path: str | None = None
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    # connection --------------------------------------------------------------------------
    def _resolve(self) -> tuple[str, int, str, list[str]]:
        host, port, user = self.target.host, self.target.port, self.target.user
        identities = list(self.identities)
        cfg_path = Path.home() / ".ssh" / "config"
        if cfg_path.is_file():
            try:
                cfg = paramiko.SSHConfig.from_path(str(cfg_path)).lookup(host)
            except Exception as exc:  # paramiko raises various errors for bad config lines
                raise ProxyError(f"{cfg_path}: cannot parse: {exc}") from None
            host = cfg.get("hostname", host)
            if port is None and "port" in cfg:
                port = int(cfg["port"])
            user = user or cfg.get("user")
            identities += [str(Path(p).expanduser()) for p in cfg.get("identityfile", [])]
        env_ids = os.environ.get("FLUXNODE_SSH_IDENTITY")
        if env_ids:
            identities += env_ids.split(os.pathsep)
        return (
            host,
            port or 22,
            user or getpass.getuser(),
            [i for i in identities if Path(i).is_file()],
        )

    def connect(self) -> None:
        host, port, user, identities = self._resolve()
        where = f"{user}@{host}:{port}"
        label = _host_key_label(host, port)
        client = paramiko.SSHClient()
        system = Path("/etc/ssh/ssh_known_hosts")
        try:
            if system.is_file():
                client.load_system_host_keys(str(system))
            if self.known_hosts.is_file():
                client.load_host_keys(str(self.known_hosts))
        except (OSError, paramiko.SSHException) as exc:
            raise ProxyError(f"cannot read known hosts: {exc}") from None
        known_file = self.known_hosts
        accept_new = self.accept_new
        report = self.report

        class _Policy(paramiko.MissingHostKeyPolicy):
            def missing_host_key(self, client, hostname, key):  # noqa: N805 - paramiko's signature
                fingerprint = f"{key.get_name()} {getattr(key, 'fingerprint', '')}".strip()
                if not accept_new:
                    raise ProxyError(
                        f"host key for {hostname} is not known ({fingerprint}); add it to "
                        f"{known_file} "
                        f"(e.g. ssh-keyscan -p {port} {host} >> {known_file}) or pass "
                        "--accept-new-host-key "
                        "(FLUXNODE_SSH_ACCEPT_NEW=1)"
                    )
                client.get_host_keys().add(hostname, key.get_name(), key)
                known_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(known_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, "a") as f:
                    f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
                report(
                    f"fluxnode-proxy: added host key for {hostname} ({fingerprint}) to {known_file}"
                )

        client.set_missing_host_key_policy(_Policy())
        try:
            client.connect(
                host, port=port, username=user, key_filename=identities or None, allow_agent=True,
                look_for_keys=True, timeout=CONNECT_TIMEOUT, banner_timeout=CONNECT_TIMEOUT,
                auth_timeout=CONNECT_TIMEOUT,
            )
        except ProxyError:
            client.close()
            raise
        except socket.gaierror:
            client.close()
            raise ProxyError(f"cannot resolve host {host!r}") from None
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise ProxyError(
                f"host key for {label} has CHANGED (got {exc.key.get_name()}, {known_file} has a "
                "different key); "
                "refusing to connect -- remove the old key if the change is expected"
            ) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            tried = ", ".join(["agent", *(identities or []), "~/.ssh/id_*"])
            raise ProxyError(f"authentication failed for {where} ({exc}; tried {tried})") from None
        except (paramiko.SSHException, EOFError) as exc:
            client.close()
            raise ProxyError(f"ssh to {where} failed: {exc or type(exc).__name__}") from None
        except OSError as exc:
            client.close()
            causes = getattr(
                exc, "errors", None
            )  # paramiko's NoValidConnectionsError: one per address
            if causes:
                exc = next(iter(causes.values()))
            raise ProxyError(
                f"cannot connect to {host} port {port}: {exc.strerror or exc}"
            ) from None
        self.client = client
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(30)

    def _remote_command(self, *args: str) -> str:
        return " ".join([self.rcmd, *(shlex.quote(a) for a in args)])

    def check_remote(self) -> None:
        """Run the relay once with --check so a missing remote socket fails before COMMAND runs."""
        assert self.client is not None
        chan = self._open_channel("--check", self.target.path)
        out = bytearray()
        while True:
            data = chan.recv_stderr(CHUNK)
            if not data:
                break
            out += data
        status = chan.recv_exit_status()
        chan.close()
        if status == 0:
            return
        lines = out.decode(errors="replace").strip().splitlines()
        if status == 127:
            raise ProxyError(
                f"{self.target.display}: remote command {self.rcmd!r} not found (set "
                "FLUXNODE_SSH_RCMD)"
            )
        msg = (lines[-1] if lines else f"exit status {status}").removeprefix("fluxnode-relay: ")
        raise ProxyError(f"{self.target.display}: {msg}")

    def _open_channel(self, *args: str):
        assert self.client is not None
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise ProxyError(f"{self.target.display}: the SSH connection is closed")
        try:
            chan = transport.open_session(timeout=CONNECT_TIMEOUT)
            chan.exec_command(self._remote_command(*args))
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise ProxyError(f"{self.target.display}: cannot start remote relay: {exc}") from None
        return chan

    # local socket ------------------------------------------------------------------------
    def listen(self) -> str:
        self.tmpdir = tempfile.mkdtemp(prefix="fluxnode-proxy-")  # mode 0700
        self.socket_path = os.path.join(self.tmpdir, "local")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(self.socket_path)
        finally:
            os.umask(old)
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)
        self._thread.start()
        return self.socket_path

    def _accept_loop(self) -> None:
        assert self._listener is not None
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select():
                    if key.fileobj == self._wake_r:
                        return
                    try:
                        conn, _ = self._listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        return
                    conn.setblocking(True)
                    threading.Thread(
                        target=self._serve, args=(conn,), name="proxy-conn", daemon=True
                    ).start()
        finally:
            sel.close()

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.add(conn)
        chan = None
        try:
            try:
                chan = self._open_channel(self.target.path)
            except ProxyError as exc:
                self.report(f"fluxnode-proxy: {exc}")
                return
            upstream = threading.Thread(
                target=_copy_to_channel, args=(conn, chan), name="proxy-up", daemon=True
            )
            upstream.start()
            while True:
                data = chan.recv(CHUNK)
                if not data:
                    break
                conn.sendall(data)
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
            err = bytearray()
            while chan.recv_stderr_ready():
                chunk = chan.recv_stderr(CHUNK)
                if not chunk:
                    break
                err += chunk
            for line in err.decode(errors="replace").splitlines():
                self.report(f"fluxnode-proxy: remote: {line.removeprefix('fluxnode-relay: ')}")
            upstream.join()
        except OSError:
            pass
        except (
            Exception
        ) as exc:  # never a traceback from a relay thread: one line, the rest keeps working
            self.report(f"fluxnode-proxy: connection relay failed: {type(exc).__name__}: {exc}")
        finally:
            if chan is not None:
                chan.close()
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._conns.discard(conn)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for conn in list(self._conns):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        if self._listener is not None:
            self._listener.close()
        if self.client is not None:
            self.client.close()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _copy_to_channel(conn: socket.socket, chan) -> None:
    try:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                break
            chan.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError, EOFError):
            chan.shutdown_write()
