"""Every command that talks to a broker reaches it over tcp:// too (it takes the CURVE
certificate such a URI needs), says what is wrong with a bad TARGET, and names a failing
service once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fluxnode.testing.instance import Instance


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    with Instance(4, tmp_path_factory.mktemp("conn"), modules=None) as inst:
        yield inst


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLUXNODE_")}
    return subprocess.run([sys.executable, "-m", "fluxnode", *args], env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=60)


COMMANDS = [
    ("resource", "list"),
    ("resource", "info"),
    ("resource", "R"),
    ("overlay", "status"),
    ("overlay", "errors"),
    ("overlay", "lookup", "0-3"),
    ("overlay", "parentof", "3"),
    ("ping", "--count", "1", "3"),
    ("config", "reload"),
    ("allocs",),
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_tcp_uri_with_the_certificate_works_and_without_it_is_refused(inst, command):
    local = run(*command, "--uri", inst.uri)
    assert local.returncode == 0, local.stderr
    tcp = inst.tcp_uri(0)
    out = run(*command, "--uri", tcp, "--curve-cert", inst.cert_path)
    assert out.returncode == 0, out.stderr
    if command[0] not in ("ping", "config"):  # times and routes differ; config says nothing
        assert out.stdout == local.stdout
    env = run(*command, env={"FLUXNODE_URI": tcp, "FLUXNODE_CURVE_CERT": inst.cert_path})
    assert env.returncode == 0, env.stderr
    missing = run(*command, "--uri", tcp)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "certificate" in missing.stderr.lower(), missing.stderr


@pytest.mark.parametrize("target", ["-1", "1!", "!x", "1!-y", "a b"])
def test_ping_names_a_bad_target(inst, target):
    out = run("ping", "--count", "1", "--uri", inst.uri, "--", target)
    assert out.returncode == 2, out
    assert "Invalid value for TARGET" in out.stderr and repr(target) in out.stderr, out.stderr


def test_a_failing_service_is_named_once(inst):
    out = run("overlay", "status", "--rank", "99", "--uri", inst.uri)
    assert out.returncode == 1
    assert out.stderr.strip() == "Error: overlay.topology: no such rank 99", out.stderr
