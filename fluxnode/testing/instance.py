"""A real N-broker fluxnode instance for tests, launched the way `fluxnode start` does.

    with Instance(size=8, tmp_path=tmp_path) as inst:
        with inst.client() as c:
            c.rpc("broker.ping", {}, nodeid=7)
        inst.kill(3)          # SIGKILL broker rank 3
        inst.restart(3)       # start rank 3 alone again (standalone `fluxnode broker`)

`fluxnode start --test-size N` runs in a subprocess whose COMMAND waits on its stdin;
stopping closes stdin, so the instance shuts down cleanly (and also if the test process
dies). Teardown checks that it did, from the outside, and fails the test if not: `fluxnode
start` must exit 0 without having to SIGKILL a broker (it names each broker its fallback
signals), no broker it forked may outlive it, and a broker the test restarted must exit 0
by itself or on SIGTERM. Whatever is still running is then killed, so nothing leaks even
when the check fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fluxnode.agent.broker.client import Client, ConnectError, RPCError
from fluxnode.broker_conf import hostlist
from fluxnode.testing.exits import ExitWatcher
from fluxnode.testing.waiting import wait_for

WAIT_STDIN = "import sys; sys.stdin.read()"


class Instance:
    def __init__(
        self,
        size: int,
        tmp_path: Path | None = None,
        *,
        topo: str = "kary:2",
        attrs: dict[str, str] | None = None,
        tbon: dict[str, str] | None = None,
        resources: dict[str, dict] | None = None,
        hostname_prefix: str = "node",
        modules: str | None = "",
        timeout: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> None:
        """`resources` maps hostname -> override dict (cores, gpus, ...); `modules` sets
        broker.modules
        ("" loads none, None keeps the default scheduler service)."""
        self.size = size
        # Not under pytest's tmp_path: concurrent pytest sessions prune old basetemp dirs.
        self.tmp_path = Path(tempfile.mkdtemp(prefix="fluxnode-test-"))
        self.rundir = self.tmp_path / "instance"
        self.topo = topo
        self.attrs = dict(attrs or {})
        if modules is not None:
            self.attrs.setdefault("broker.modules", modules)
        self.tbon = dict(tbon or {})
        self.resources = resources
        self.prefix = hostname_prefix
        self.timeout = timeout
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self.restarted: dict[int, subprocess.Popen] = {}
        self.spawned: list[subprocess.Popen] = []  # every restart, also those replaced since
        self.killed_by_test: set[int] = (
            set()
        )  # pids inst.kill() signalled: their exit codes are expected
        self.forked: ExitWatcher | None = None  # the brokers `fluxnode start` forked
        self.code: int | None = None  # `fluxnode start`'s exit code once stopped
        self.stderr_path = self.tmp_path / "start.stderr"

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> Instance:
        argv = [
            sys.executable,
            "-m",
            "fluxnode",
            "start",
            "--test-size",
            str(self.size),
            "--topo",
            self.topo,
            "--rundir",
            str(self.rundir),
            "--test-hosts",
            hostlist.encode(f"{self.prefix}{i}" for i in range(self.size)),
            "--quiet",
            "--quorum-timeout",
            str(self.timeout),
        ]
        for k, v in self.attrs.items():
            argv += ["-S", f"{k}={v}"]
        for k, v in self.tbon.items():
            argv += ["--tbon", f"{k}={v}"]
        if self.resources:
            d = self.tmp_path / "resources"
            d.mkdir()
            for host, spec in self.resources.items():
                (d / f"{host}.json").write_text(json.dumps(spec))
            argv += ["--resource-override-dir", str(d)]
        argv += [
            "--",
            sys.executable,
            "-c",
            f"import pathlib; pathlib.Path({str(self.rundir / 'ready')!r}).touch(); " + WAIT_STDIN,
        ]
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=self.env,
        )
        try:
            deadline = time.monotonic() + self.timeout
            while not self._ready():
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.size}-broker instance not ready within {self.timeout}s: "
                        f"{self.stderr()}"
                    )
                time.sleep(0.01)
        except BaseException:
            self.stop(check=False)
            raise
        self.info = json.loads((self.rundir / "instance.json").read_text())
        self.forked = ExitWatcher({b["rank"]: b["pid"] for b in self.info["brokers"] if b["pid"]})
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"fluxnode start exited with {self.proc.returncode}: {self.stderr()}"
            )
        return (self.rundir / "ready").exists()

    def stop(self, check: bool = True) -> int | None:
        """Shut down cleanly (close the command's stdin), check that it was clean, then kill
        anything left. Returns `fluxnode start`'s exit code; with `check`, raises
        AssertionError naming every broker that did not stop by itself (after cleaning up)."""
        problems = self._shutdown()
        if hasattr(self, "_stderr"):
            self._stderr.close()
        if self.forked is not None:
            self.forked.close()
        shutil.rmtree(self.tmp_path, ignore_errors=True)
        if check and problems:
            raise AssertionError("unclean instance shutdown:\n  " + "\n  ".join(problems))
        return self.code

    def _shutdown(self) -> list[str]:
        problems: list[str] = []
        self.code = None
        if self.proc is None:
            return problems
        leader = self.restarted.get(0)
        if leader is not None and leader.poll() is None:
            # `fluxnode start` only knows the rank 0 it forked: shut the restarted one's tree down
            try:
                self.rpc("broker.shutdown", timeout=5)
            except (ConnectError, RPCError, OSError) as exc:
                problems.append(f"restarted rank 0 refused broker.shutdown: {exc}")
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            problems.append("fluxnode start did not exit within 30 s of its command; killed it")
            self.proc.kill()
            self.proc.wait()
        err = self.stderr()
        if self.code not in (0, None):
            problems.append(f"fluxnode start exited with code {self.code}: {err[-500:]}")
        problems += [line for line in err.splitlines() if "did not stop; sending SIGKILL" in line]
        if self.forked is not None and not self.forked.wait(2):
            for rank in self.forked.running():
                problems.append(
                    f"broker rank {rank} (pid {self.forked.pids[rank]}) outlived fluxnode start; "
                    "SIGKILL"
                )
                self.forked.kill(rank)
        # Restarted brokers in the tree got the shutdown too and finish about when `fluxnode
        # start` does; one cut off from the tree (its parent gone) is asked to leave (SIGTERM).
        deadline = time.monotonic() + 5
        for p in self.spawned:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    problems.append(f"restarted broker pid {p.pid} ignored SIGTERM; SIGKILL")
                    p.kill()
                    p.wait()
                    continue
                if p.returncode == -signal.SIGTERM:
                    # the signal met it while exiting anyway (Python restores SIG_DFL then)
                    continue
            if p.returncode != 0 and p.pid not in self.killed_by_test:
                problems.append(f"restarted broker pid {p.pid} exited with code {p.returncode}")
        return problems

    def __enter__(self) -> Instance:
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop(check=exc_type is None)  # a failing test keeps its own error

    # -- access -------------------------------------------------------------------------
    @property
    def uri(self) -> str:
        return self.info["uri"]

    @property
    def config_path(self) -> str:
        return self.info["config"]

    @property
    def cert_path(self) -> str:
        return str(self.rundir / "curve.cert")

    @property
    def hostnames(self) -> list[str]:
        return self.info["hostnames"]

    @property
    def pids(self) -> dict[int, int]:
        pids = {b["rank"]: b["pid"] for b in self.info.get("brokers", []) if b["pid"]}
        pids.update({r: p.pid for r, p in self.restarted.items()})
        return pids

    def broker_uri(self, rank: int) -> str:
        return self._broker_info(rank)["attrs"]["local-uri"]

    def _broker_info(self, rank: int) -> dict:
        return next(b for b in self.info["brokers"] if b["rank"] == rank)

    def statedir(self, rank: int) -> Path:
        """Where broker `rank` keeps its state (rank 0: the scheduler journal); a restart
        keeps it."""
        return Path(self._broker_info(rank)["attrs"]["statedir"])

    def tcp_uri(self, rank: int = 0) -> str:
        """The TBON endpoint of `rank` (rank 0 and interior ranks bind one)."""
        from fluxnode.broker_conf import config

        return config.load(self.config_path).connect_uri(rank)

    def log(self, rank: int) -> str:
        p = self.rundir / str(rank) / "broker.log"
        return p.read_text() if p.exists() else ""

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def client(self, rank: int = 0, timeout: float = 10.0) -> Client:
        return Client.connect(self.broker_uri(rank), timeout=timeout)

    def rpc(
        self, topic: str, payload: dict | None = None, nodeid: int = 0, timeout: float = 10.0
    ) -> dict:
        with self.client(timeout=timeout) as c:
            return c.rpc(topic, payload, nodeid=nodeid)

    def health(self, rank: int) -> dict:
        return self.rpc("overlay.health", nodeid=rank)

    def child_status(self, parent: int, child: int) -> str:
        return next(c["status"] for c in self.health(parent)["children"] if c["rank"] == child)

    def online(self) -> str:
        return self.rpc("broker.status")["online"]

    # -- fault injection ----------------------------------------------------------------
    def kill(self, rank: int, sig: int = signal.SIGKILL) -> None:
        pid = self.pids[rank]
        self.killed_by_test.add(pid)
        os.kill(pid, sig)
        if rank in self.restarted:
            self.restarted[rank].wait(timeout=10)
        else:
            wait_for(lambda: _gone(pid), timeout=10, what=f"rank {rank} (pid {pid}) to exit")

    def restart(self, rank: int) -> subprocess.Popen:
        """Start broker `rank` alone again with the attributes `fluxnode start` gave it."""
        b = self._broker_info(rank)
        argv = [sys.executable, "-m", "fluxnode", "broker", "--config-path", self.config_path,
                "--hostname", b["hostname"]]
        for k, v in b["attrs"].items():
            argv += ["-S", f"{k}={v}"]
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=self.env,
            preexec_fn=_die_with_parent,
        )
        self.restarted[rank] = p
        self.spawned.append(p)
        return p

    def add_broker(
        self, rank: int, hostname: str, resources: dict | None = None
    ) -> subprocess.Popen:
        """Start a broker for a rank the instance did not start with (after its config grew).

        It gets the attributes `fluxnode start` gives its own brokers (rundir, local-uri, log)
        and is killed at teardown like a restarted one.
        """
        d = self.rundir / str(rank)
        d.mkdir(mode=0o700, exist_ok=True)
        attrs = {"log-stderr-level": "4", "log-filename": str(d / "broker.log"), **self.attrs,
                 "rundir": str(d), "local-uri": f"local://{d}/local", "statedir": str(d)}
        if resources is not None:
            f = self.tmp_path / f"{hostname}.resources.json"
            f.write_text(json.dumps(resources))
            attrs["resource.override"] = str(f)
        brokers = self.info["brokers"]
        entry = {"rank": rank, "hostname": hostname, "pid": 0, "attrs": attrs}
        brokers[:] = [b for b in brokers if b["rank"] != rank] + [entry]
        brokers.sort(key=lambda b: b["rank"])
        return self.restart(rank)


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: a restarted broker must not outlive a killed test process."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _gone(pid: int) -> bool:
    """True once `pid` is dead or a zombie (the launcher reaps its children lazily)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
