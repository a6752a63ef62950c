"""The files the agent keeps on the node's filesystem (host paths mounted into the pod).

``host_dir`` (/etc/fluxnode): broker.toml, R.json, curve.cert (0600).
``run_dir`` (/run/fluxnode): broker.pid, broker.uri and the broker's local socket.
``bin_dir`` (/opt/fluxnode/bin in the DaemonSet): only the ``fluxnode-connect`` script.
Every write goes to a temporary file and is renamed into place, so the broker, the
connect script or a person never reads a half-written file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

CONFIG_NAME = "broker.toml"
R_NAME = "R.json"
CERT_NAME = "curve.cert"
PID_NAME = "broker.pid"
URI_NAME = "broker.uri"
CONNECT_NAME = "fluxnode-connect"


def write_atomic(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` to ``path`` unless it already holds exactly that; True if written."""
    try:
        if path.read_text() == text and (path.stat().st_mode & 0o777) == mode:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return True


@dataclass(frozen=True)
class HostFiles:
    host_dir: Path
    run_dir: Path
    bin_dir: Path

    @property
    def config(self) -> Path:
        return self.host_dir / CONFIG_NAME

    @property
    def cert(self) -> Path:
        return self.host_dir / CERT_NAME

    @property
    def resources(self) -> Path:
        return self.host_dir / R_NAME

    @property
    def pid(self) -> Path:
        return self.run_dir / PID_NAME

    @property
    def uri(self) -> Path:
        return self.run_dir / URI_NAME

    @property
    def connect_script(self) -> Path:
        return self.bin_dir / CONNECT_NAME

    @property
    def local_uri(self) -> str:
        return f"local://{self.run_dir / 'local'}"

    def prepare(self) -> None:
        """Create the config and run directories (the bin directory is created on first write)."""
        for d, mode in ((self.host_dir, 0o755), (self.run_dir, 0o700)):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, mode)

    def write_cert(self, text: str) -> bool:
        return write_atomic(self.cert, text, 0o600)

    def write_config(self, text: str) -> bool:
        return write_atomic(self.config, text, 0o644)

    def write_resources(self, R: dict) -> bool:
        return write_atomic(self.resources, json.dumps(R, indent=1, sort_keys=True) + "\n", 0o644)

    def write_connect_script(self, text: str) -> bool:
        return write_atomic(self.connect_script, text, 0o755)

    def write_broker(self, pid: int, uri: str) -> None:
        write_atomic(self.uri, uri + "\n", 0o644)
        write_atomic(self.pid, f"{pid}\n", 0o644)

    def clear_broker(self) -> None:
        self.pid.unlink(missing_ok=True)
