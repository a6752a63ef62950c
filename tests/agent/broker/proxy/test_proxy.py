"""`fluxnode proxy` and `fluxnode relay` against real sockets and a real sshd on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fluxnode.testing.instance import Instance
from fluxnode.testing.ports import refused_port
from fluxnode.testing.waiting import wait_for

CLIENT = str(Path(__file__).with_name("echo_client.py"))
FLUXNODE = [sys.executable, "-m", "fluxnode"]


def run(args, env=None, timeout=60, **kw):
    r = subprocess.run(
        [*FLUXNODE, *args], capture_output=True, text=True, timeout=timeout, env=env, **kw
    )
    assert "Traceback" not in r.stderr, r.stderr
    return r


# -- relay --------------------------------------------------------------------------------


def test_relay_copies_both_ways(echo):
    payload = os.urandom(300_000)
    r = subprocess.run(
        [*FLUXNODE, "relay", echo.path], input=payload, capture_output=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == payload


def test_relay_accepts_local_uri(echo):
    r = subprocess.run(
        [*FLUXNODE, "relay", f"local://{echo.path}"], input=b"hi", capture_output=True, timeout=60
    )
    assert r.returncode == 0 and r.stdout == b"hi"


def test_relay_errors(tmp_path, echo):
    r = run(["relay", str(tmp_path / "nope")])
    assert r.returncode == 1
    assert (
        r.stderr.strip()
        == f"fluxnode-relay: cannot connect to {tmp_path / 'nope'}: No such file or directory"
    )
    r = run(["relay", "--check", str(tmp_path / "nope")])
    assert r.returncode == 1
    assert (
        r.stderr.strip()
        == f"fluxnode-relay: no broker socket at {tmp_path / 'nope'} (is the broker running?)"
    )
    assert run(["relay", "--check", echo.path]).returncode == 0


# -- local:// -----------------------------------------------------------------------------


def test_local_runs_command_with_uri(echo):
    r = run(["proxy", f"local://{echo.path}", sys.executable, CLIENT, "3", "1000"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"ok 3x1000 via local://{echo.path}"


def test_local_exit_code_and_shell(echo):
    assert run(["proxy", f"local://{echo.path}", "sh", "-c", "exit 7"]).returncode == 7
    env = dict(os.environ, SHELL="/bin/sh")
    r = run(["proxy", f"local://{echo.path}"], env=env, input='echo "uri=$FLUXNODE_URI"\n')
    assert r.returncode == 0 and r.stdout.strip() == f"uri=local://{echo.path}"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (
            "local:///nonexistent/sock",
            "no broker socket at /nonexistent/sock (is the broker running?)",
        ),
        ("local://relative/sock", "local://relative/sock: local:// needs an absolute socket path"),
        ("http://x/y", "http://x/y: unsupported URI scheme 'http'"),
        ("ssh://host", "ssh://host: no socket path"),
        ("ssh:///path", "ssh:///path: no host"),
        ("ssh://h:notaport/p", "ssh://h:notaport/p: bad ssh URI"),
    ],
)
def test_bad_uris(uri, message):
    r = run(["proxy", uri, "true"])
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fluxnode-proxy: {message}")


def test_local_not_a_socket(tmp_path):
    f = tmp_path / "plain"
    f.write_text("")
    r = run(["proxy", f"local://{f}", "true"])
    assert r.returncode == 1 and r.stderr.strip() == f"fluxnode-proxy: {f} is not a Unix socket"


def test_command_not_found(echo):
    r = run(["proxy", f"local://{echo.path}", "no-such-command-xyz"])
    assert (
        r.returncode == 1
        and r.stderr.strip() == "fluxnode-proxy: no-such-command-xyz: command not found"
    )


# -- ssh:// -------------------------------------------------------------------------------


def test_ssh_relays_many_connections(sshd, ssh_env, echo):
    r = run(
        ["proxy", sshd.uri(echo.path), sys.executable, CLIENT, "4", "1000000"],
        env=ssh_env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr + sshd.log()[-2000:]
    out = r.stdout.strip()
    assert out.startswith("ok 4x1000000 via local://") and "fluxnode-proxy-" in out
    proxy_dir = Path(out.rsplit("local://", 1)[1]).parent
    assert not proxy_dir.exists()  # cleaned up
    assert echo.connections >= 5  # 4 relayed + the --check probe


def test_ssh_private_socket_dir_and_exit_code(sshd, ssh_env, echo):
    code = ("import os, stat, sys; p = os.environ['FLUXNODE_URI'][8:]; "
            "m = stat.S_IMODE(os.stat(os.path.dirname(p)).st_mode); print(oct(m)); sys.exit(5)")
    r = run(["proxy", sshd.uri(echo.path), sys.executable, "-c", code], env=ssh_env)
    assert r.returncode == 5 and r.stdout.strip() == "0o700"


def test_ssh_options_instead_of_env(sshd, ssh_env, echo):
    env = {
        k: v
        for k, v in ssh_env.items()
        if k not in ("FLUXNODE_SSH_KNOWN_HOSTS", "FLUXNODE_SSH_IDENTITY")
    }
    r = run(
        [
            "proxy",
            "-i",
            str(sshd.identity),
            "--known-hosts",
            str(sshd.known_hosts),
            sshd.uri(echo.path),
            sys.executable,
            CLIENT,
            "1",
            "10",
        ],
        env=env,
    )
    assert r.returncode == 0, r.stderr


def test_ssh_no_remote_socket(sshd, ssh_env, tmp_path):
    r = run(["proxy", sshd.uri(str(tmp_path / "missing")), "true"], env=ssh_env)
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"fluxnode-proxy: {sshd.uri(str(tmp_path / 'missing'))}: no broker socket at "
        f"{tmp_path / 'missing'} (is the broker running?)"
    )


def test_ssh_remote_command_missing(sshd, ssh_env, echo):
    env = dict(ssh_env, FLUXNODE_SSH_RCMD="/nonexistent/fluxnode relay")
    r = run(["proxy", sshd.uri(echo.path), "true"], env=env)
    assert (
        r.returncode == 1 and "remote command '/nonexistent/fluxnode relay' not found" in r.stderr
    )
    assert len(r.stderr.strip().splitlines()) == 1


def test_ssh_unknown_host_refused_then_accepted(sshd, ssh_env, echo, tmp_path):
    kh = tmp_path / "kh" / "known_hosts"
    env = dict(ssh_env, FLUXNODE_SSH_KNOWN_HOSTS=str(kh))
    r = run(["proxy", sshd.uri(echo.path), "true"], env=env)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"fluxnode-proxy: host key for [127.0.0.1]:{sshd.port} is not known"
    )
    assert "--accept-new-host-key" in lines[0] and not kh.exists()
    r = run(["proxy", "--accept-new-host-key", sshd.uri(echo.path), "true"], env=env)
    assert r.returncode == 0, r.stderr
    assert "added host key" in r.stderr
    assert kh.read_text().split() == sshd.known_hosts.read_text().split()
    assert oct(kh.stat().st_mode & 0o777) == "0o600"
    r = run(["proxy", sshd.uri(echo.path), "true"], env=env)  # now known: no flag needed
    assert r.returncode == 0 and r.stderr == ""


def test_ssh_changed_host_key_refused(sshd, ssh_env, echo, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=60
    )
    kind, key = (tmp_path / "other_key.pub").read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {kind} {key}\n")
    env = dict(ssh_env, FLUXNODE_SSH_KNOWN_HOSTS=str(kh), FLUXNODE_SSH_ACCEPT_NEW="1")
    r = run(["proxy", sshd.uri(echo.path), "true"], env=env)
    assert r.returncode == 1
    assert r.stderr.strip().startswith(
        f"fluxnode-proxy: host key for [127.0.0.1]:{sshd.port} has CHANGED"
    )


def test_ssh_auth_failure(sshd, ssh_env, echo, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=60
    )
    env = dict(ssh_env, FLUXNODE_SSH_IDENTITY=str(stranger))
    r = run(["proxy", sshd.uri(echo.path), "true"], env=env)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"fluxnode-proxy: authentication failed for {sshd.user}@127.0.0.1:{sshd.port}"
    )


def test_ssh_connection_refused(ssh_env, echo):
    with refused_port() as port:  # held: nothing can start listening there meanwhile
        r = run(["proxy", f"ssh://127.0.0.1:{port}{echo.path}", "true"], env=ssh_env)
    assert r.returncode == 1
    assert (
        r.stderr.strip()
        == f"fluxnode-proxy: cannot connect to 127.0.0.1 port {port}: Connection refused"
    )


# -- end to end: a real 2-broker instance behind a real sshd -------------------------------------


def test_ssh_proxy_to_real_instance(sshd, ssh_env, tmp_path):
    pytest.importorskip("fluxnode.commands.ping")

    with Instance(size=2, tmp_path=tmp_path) as inst:
        path = inst.uri.removeprefix("local://")
        r = run(
            ["proxy", sshd.uri(path), *FLUXNODE, "ping", "--count", "3", "--interval", "0.05", "1"],
            env=ssh_env,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr + inst.stderr()
        lines = r.stdout.strip().splitlines()
        assert len([ln for ln in lines if "seq=" in ln]) == 3, r.stdout
        r = run(
            ["proxy", sshd.uri(path), *FLUXNODE, "ping", "--count", "3", "--interval", "0.05", "0"],
            env=ssh_env,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr


def test_sigterm_is_forwarded_and_tunnel_cleaned_up(sshd, ssh_env, echo, tmp_path):
    marker = tmp_path / "uri"
    code = (
        "import os, signal, sys, pathlib; signal.signal(signal.SIGTERM, lambda *a: sys.exit(3)); "
        f"pathlib.Path({str(marker)!r}).write_text(os.environ['FLUXNODE_URI']); signal.pause()"
    )
    proc = subprocess.Popen(
        [*FLUXNODE, "proxy", sshd.uri(echo.path), sys.executable, "-c", code],
        env=ssh_env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: marker.exists() and marker.read_text(),
            timeout=30,
            what="proxied command to start",
        )
        proxy_dir = Path(marker.read_text().removeprefix("local://")).parent
        assert proxy_dir.is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 3
        assert not proxy_dir.exists()
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
