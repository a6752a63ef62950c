"""`fluxnode config check|render|topology` and their one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

from fluxnode.broker_conf import config


def run(*args):
    r = subprocess.run(
        [sys.executable, "-m", "fluxnode", "config", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in r.stderr
    return r


def test_render_then_check(tmp_path):
    out = tmp_path / "broker.toml"
    r = run(
        "render",
        "--hosts",
        "kind-control-plane,kind-worker[1-3]",
        "--port",
        "9000",
        "--topo",
        "binomial",
        "--curve-cert",
        "/etc/fluxnode/curve.cert",
        "--torpid-max",
        "1m",
        "-o",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    cfg = config.load(out)
    assert cfg.size == 4 and cfg.tbon.topo == "binomial" and cfg.tbon.torpid_max == 60.0
    r = run("check", str(out), "--hostname", "kind-worker3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"{out}: ok: size 4, tbon.topo binomial, maxlevel 2",
        "hosts: kind-control-plane,kind-worker[1-3]",
        "kind-worker3: rank 3, parent 2, children -",
        "kind-worker3: connect to tcp://kind-worker2:9000",
    ]


def test_render_to_stdout_loads():
    r = run("render", "--hosts", "solo")
    assert r.returncode == 0 and config.loads(r.stdout).size == 1


def test_check_error_is_one_line(tmp_path):
    bad = tmp_path / "broker.toml"
    bad.write_text('[tbon]\ntorpid_max = "soon"\n')
    r = run("check", str(bad))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"fluxnode-config: {bad}: tbon.torpid_max: invalid duration 'soon': expected a number with "
        "optional "
        "suffix ms, s, m, h or d (e.g. '30s')"
    ]


def test_check_cert(tmp_path):
    cert = tmp_path / "curve.cert"
    assert (
        subprocess.run(
            [sys.executable, "-m", "fluxnode", "keygen", str(cert)], timeout=60
        ).returncode
        == 0
    )
    conf = tmp_path / "broker.toml"
    conf.write_text(f'[bootstrap]\ncurve_cert = "{cert}"\n')
    assert run("check", "--cert", str(conf)).returncode == 0
    conf.write_text(f'[bootstrap]\ncurve_cert = "{tmp_path}/missing"\n')
    r = run("check", "--cert", str(conf))
    assert r.returncode == 1 and "no such file" in r.stderr


def test_render_errors():
    r = run("render", "--hosts", "a,b")
    assert r.returncode == 1 and "--curve-cert PATH is required" in r.stderr
    r = run("render", "--hosts", "n[1-")
    assert (
        r.returncode == 1
        and r.stderr.strip() == "fluxnode-config: --hosts: invalid hostlist 'n[1-': unmatched '['"
    )
    r = run("render", "--hosts", "a,b", "--curve-cert", "/c", "--topo", "ring")
    assert r.returncode == 1 and "unknown scheme 'ring'" in r.stderr


def test_topology_table():
    r = run("topology", "--topo", "kary:2", "--size", "5")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        "RANK  PARENT  LEVEL  CHILDREN",
        "   0       -      0  1-2",
        "   1       0      1  3-4",
        "   2       0      1  -",
        "   3       1      2  -",
        "   4       1      2  -",
        "# kary:2: size 5, maxlevel 2",
    ]


def test_topology_from_config(tmp_path):
    conf = tmp_path / "b.toml"
    conf.write_text(
        '[bootstrap]\ncurve_cert = "/c"\ndefault_port = 1\ndefault_bind = "tcp://*:%p"\n'
        'default_connect = "tcp://%h:%p"\nhosts = [{host = "n[0-2]"}, {host = "n2", parent = '
        '"n1"}]\n'
    )
    r = run("topology", "--config", str(conf))
    assert r.returncode == 0
    assert r.stdout.splitlines()[-2:] == [
        "   2       1      2  -         n2",
        "# custom: size 3, maxlevel 2",
    ]


def test_topology_errors():
    assert run("topology", "--topo", "kary:2").returncode == 1
    r = run("topology", "--topo", "custom:x", "--size", "3")
    assert r.returncode == 1 and "custom takes no argument" in r.stderr


def test_reload_without_a_broker_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FLUXNODE_URI"}
    r = subprocess.run(
        [sys.executable, "-m", "fluxnode", "config", "reload"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("fluxnode-config: no broker URI given")
    r = run("reload", "--uri", f"local://{tmp_path}/nothing")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith(f"fluxnode-config: no broker is listening at local://{tmp_path}/nothing")
