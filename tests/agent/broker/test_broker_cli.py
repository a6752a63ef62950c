"""`fluxnode broker` as a standalone daemon: startup errors are one line; a lone broker serves."""

import os
import signal
import stat
import subprocess
import sys

from fluxnode.agent.broker.client import Client
from fluxnode.broker_conf import certificate
from fluxnode.broker_conf.render import render_broker_toml

from fluxnode.testing.waiting import wait_for

BROKER = [sys.executable, "-m", "fluxnode", "broker"]


def write_config(tmp_path, hosts=("a0", "a1")):
    cert = tmp_path / "curve.cert"
    certificate.write(cert, certificate.generate())
    cfg = tmp_path / "broker.toml"
    cfg.write_text(render_broker_toml(list(hosts), curve_cert=str(cert), port=1, bind="tcp://127.0.0.1:%p",
                                      connect="tcp://127.0.0.1:%p"))
    return cfg


def run(*args):
    return subprocess.run([*BROKER, *args], capture_output=True, text=True, timeout=30)


def test_unknown_hostname_is_a_one_line_error(tmp_path):
    p = run("--config-path", str(write_config(tmp_path)), "--hostname", "zzz")
    assert p.returncode == 1
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "'zzz' is not in the [bootstrap] hosts" in p.stderr


def test_missing_config_is_a_one_line_error(tmp_path):
    p = run("--config-path", str(tmp_path / "nope.toml"), "--hostname", "a0")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "nope.toml" in p.stderr


def test_unknown_attribute_is_a_usage_error(tmp_path):
    p = run("--config-path", str(write_config(tmp_path)), "--hostname", "a0", "-S", "bogus=1")
    assert p.returncode == 2 and "unknown attribute" in p.stderr


def test_lone_broker_without_hosts_serves_and_stops_on_sigterm(tmp_path):
    cfg = tmp_path / "broker.toml"
    cfg.write_text("[bootstrap]\n")
    rundir = tmp_path / "run"
    p = subprocess.Popen(
        [
            *BROKER,
            "--config-path",
            str(cfg),
            "--hostname",
            "solo",
            "-S",
            f"rundir={rundir}",
            "-S",
            "broker.modules=",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sock = rundir / "local"
        wait_for(sock.exists, timeout=20, what="local socket")
        assert stat.S_IMODE(os.stat(rundir).st_mode) == 0o700
        with Client.connect(f"local://{sock}") as c:
            assert c.rpc("attr.get", {"name": "hostname"})["value"] == "solo"
            assert c.rpc("broker.status")["state"] == "run"
            assert c.rpc("resource.list")["free"][0]["hostname"] == "solo"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 0
        assert not sock.exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
