"""Run `fluxnode agent` processes against a KubeEmulator, one per simulated node.

Each agent gets its own host/run/bin/state directories and health port; brokers all
listen on 127.0.0.1 with distinct ports (set on the emulated Node as the
``fluxnode.io/broker-port`` annotation, which the agents honour). Every agent runs in
its own session so ``stop()`` takes its broker down with it, even after a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from fluxnode.broker_conf import hostlist

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.ports import free_port
from fluxnode.testing.waiting import wait_for

PORT_ANNOTATION = "fluxnode.io/broker-port"


class AgentProcess:
    def __init__(
        self, kube: KubeEmulator, node: str, root: Path, *extra: str, namespace: str = "fluxnode"
    ):
        self.kube, self.node, self.root = kube, node, root / node
        self.host_dir, self.run_dir = self.root / "etc", self.root / "run"
        self.bin_dir, self.state_dir = self.root / "bin", self.root / "state"
        self.log_path = self.root / "agent.log"
        self.args = [
            sys.executable,
            "-m",
            "fluxnode",
            "agent",
            "--node-name",
            node,
            "--namespace",
            namespace,
            "--kubeconfig",
            str(kube.kubeconfig_path),
            "--host-dir",
            str(self.host_dir),
            "--run-dir",
            str(self.run_dir),
            "--bin-dir",
            str(self.bin_dir),
            "--state-dir",
            str(self.state_dir),
            "--bind-address",
            "127.0.0.1",
            "--health-address",
            "127.0.0.1",
            "--health-port",
            "0",
            "--restart-backoff",
            "0.2",
            "2",
            *extra,
        ]
        self.proc: subprocess.Popen | None = None

    def start(self) -> AgentProcess:
        self.root.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "FLUXNODE_URI", "NODE_NAME", "FLUXNODE_DAEMONSET")
        }
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        return self

    def terminate(self) -> None:
        """Ask the agent to stop (it stops its broker); ``stop()`` waits and cleans up."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        try:  # the broker shares the session: make sure nothing is left behind
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None
        self._log.close()


    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def broker_pid(self) -> int | None:
        try:
            pid = int((self.run_dir / "broker.pid").read_text())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def wait_broker(self, timeout: float = 30.0, other_than: int | None = None) -> int:
        return wait_for(lambda: (pid := self.broker_pid()) and pid != other_than and pid, timeout,
                        what=f"broker of {self.node} (agent log: {self.log[-2000:]})")

    def config(self) -> str:
        return (self.host_dir / "broker.toml").read_text()

    def connect(self, *command: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run a command through the rendered fluxnode-connect script."""
        env = {k: v for k, v in os.environ.items() if k != "FLUXNODE_URI"}
        return subprocess.run(
            [str(self.bin_dir / "fluxnode-connect"), *command],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )

    def http(self, path: str) -> tuple[int, str]:
        port = int((self.run_dir / "agent.health").read_text())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def add_node(kube: KubeEmulator, name: str, **kwargs) -> int:
    """An emulated node whose broker will listen on its own free loopback port."""
    port = free_port()
    kube.add_node(name, annotations={PORT_ANNOTATION: str(port)}, **kwargs)
    return port


def stop_all(agents: list[AgentProcess]) -> None:
    """Stop agents together (each waits for its broker), not one after the other."""
    for agent in agents:
        agent.terminate()
    for agent in agents:
        agent.stop()


def resource_list(agent: AgentProcess) -> dict[str, list[str]]:
    """`fluxnode resource list` through the connect script, as {state: [hosts]}."""
    out = agent.connect("fluxnode", "resource", "list")
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines()[1:]:
        cols = line.split()
        rows[cols[0]] = hostlist.decode(cols[4]) if len(cols) > 4 else []
    return rows
