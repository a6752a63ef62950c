"""A command that cannot reach a broker says so in one line naming what the user typed
(--uri or $FLUXNODE_URI, --curve-cert or $FLUXNODE_CURVE_CERT) and what to check, exit 1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from fluxnode.testing.instance import Instance
from fluxnode.testing.ports import refused_port

# Every command that connects: its words, then the arguments it needs besides the connection's
# (after the options, since `exec` passes everything after its COMMAND to COMMAND).
CONNECTING = [
    (("ping",), ("0",)),
    (("exec",), ("true",)),
    (("resource", "list"), ()),
    (("resource", "drain"), ()),
    (("overlay", "status"), ()),
    (("overlay", "lookup"), ("0",)),
    (("archive", "list"), ()),
    (("archive", "extract"), ()),
    (("alloc",), ("-N", "1")),
    (("allocs",), ()),
    (("cancel",), ("1",)),
]
IDS = [" ".join(words) for words, _ in CONNECTING]


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLUXNODE_")}
    return subprocess.run([sys.executable, "-m", "fluxnode", *args], env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=60)


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 1 and r.stdout == "", r
    assert r.stderr.endswith("\n") and r.stderr.count("\n") == 1, r.stderr
    return r.stderr.rstrip("\n")


@pytest.fixture
def closed_port():
    """A port bound but not listening: connecting to it is refused, and nobody else gets it."""
    with refused_port() as port:
        yield port


@pytest.fixture
def listening_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


NOT_RUNNING = ("is the instance running? Check {}, or start one with "
               "`fluxnode start --test-size N`")


@pytest.mark.parametrize(("words", "args"), CONNECTING, ids=IDS)
def test_no_broker_at_a_local_uri_says_what_to_check(tmp_path, words, args):
    uri = f"local://{tmp_path}/local"
    line = one_line_error(run(*words, "--uri", uri, *args))
    assert line == (f"Error: no broker is listening at {uri} (No such file or directory): "
                    + NOT_RUNNING.format("--uri"))


def test_no_broker_at_FLUXNODE_URI_names_the_variable(tmp_path):
    uri = f"local://{tmp_path}/local"
    line = one_line_error(run("ping", "0", env={"FLUXNODE_URI": uri}))
    assert line == (f"Error: no broker is listening at {uri} (No such file or directory): "
                    + NOT_RUNNING.format("$FLUXNODE_URI"))


def test_config_reload_says_the_same_in_its_own_prefix(tmp_path):
    uri = f"local://{tmp_path}/local"
    line = one_line_error(run("config", "reload", "--uri", uri))
    assert line == (f"fluxnode-config: no broker is listening at {uri} "
                    "(No such file or directory): " + NOT_RUNNING.format("--uri"))


def test_a_refused_tcp_uri_says_no_broker_listens(tmp_path, closed_port):
    uri = f"tcp://127.0.0.1:{closed_port}"
    cert = str(tmp_path / "curve.cert")  # never read: the refusal comes first
    line = one_line_error(run("resource", "list", "--uri", uri, "--curve-cert", cert))
    assert line == (f"Error: no broker is listening at {uri} (Connection refused): "
                    + NOT_RUNNING.format("--uri"))


@pytest.mark.parametrize(("words", "args"), CONNECTING, ids=IDS)
def test_a_tcp_uri_without_a_certificate_names_the_option_and_variable(words, args):
    line = one_line_error(run(*words, "--uri", "tcp://127.0.0.1:1", *args))
    assert line == ("Error: cannot connect to tcp://127.0.0.1:1: a tcp:// URI needs the "
                    "instance's CURVE certificate: pass --curve-cert PATH or set "
                    "FLUXNODE_CURVE_CERT")


def test_an_unreadable_certificate_is_named_by_how_it_was_given(tmp_path, listening_port):
    uri = f"tcp://127.0.0.1:{listening_port}"
    missing = tmp_path / "curve.cert"
    reason = f"{missing}: no such file (create one with 'fluxnode keygen {missing}')"
    line = one_line_error(run("ping", "0", "--uri", uri, "--curve-cert", str(missing)))
    assert line == f"Error: cannot connect to {uri}: --curve-cert: {reason}"
    line = one_line_error(run("ping", "0", env={"FLUXNODE_URI": uri,
                                                 "FLUXNODE_CURVE_CERT": str(missing)}))
    assert line == f"Error: cannot connect to {uri}: $FLUXNODE_CURVE_CERT: {reason}"


def test_no_uri_at_all_says_how_to_give_one():
    line = one_line_error(run("allocs"))
    assert line == ("Error: no broker URI given: pass --uri URI or set FLUXNODE_URI "
                    "(`fluxnode start` sets it for the command it runs)")


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    with Instance(1, tmp_path_factory.mktemp("handshake"), modules=None) as inst:
        yield inst


@pytest.fixture(scope="module")
def other_cert(tmp_path_factory):
    path = tmp_path_factory.mktemp("other") / "curve.cert"
    assert run("keygen", str(path)).returncode == 0
    return str(path)


# What each command puts before the error of its first RPC.
REFUSING = [
    (("ping", "--count", "1"), ("0",), "Error: 0!broker.ping: "),
    (("overlay", "status"), (), "Error: overlay.topology: "),
    (("resource", "list"), (), "Error: resource.list: "),
    (("config", "reload"), (), "fluxnode-config: "),
    (("exec",), ("true",), "fluxnode-exec: lost the broker: "),
]


@pytest.mark.parametrize(("words", "args", "prefix"), REFUSING,
                         ids=[" ".join(words[:2]) for words, _, _ in REFUSING])
def test_a_refused_handshake_names_the_certificate_option(inst, other_cert, words, args, prefix):
    uri = inst.tcp_uri(0)
    r = run(*words, "--uri", uri, "--curve-cert", other_cert, *args)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r
    assert r.stderr.rstrip("\n") == (
        f"{prefix}{uri} refused the CURVE handshake: is --curve-cert the instance's certificate?")


def test_a_refused_handshake_names_FLUXNODE_CURVE_CERT_when_it_gave_the_certificate(inst,
                                                                                    other_cert):
    uri = inst.tcp_uri(0)
    line = one_line_error(run("ping", "--count", "1", "0", env={
        "FLUXNODE_URI": uri, "FLUXNODE_CURVE_CERT": other_cert}))
    assert line == (f"Error: 0!broker.ping: {uri} refused the CURVE handshake: is "
                    "$FLUXNODE_CURVE_CERT the instance's certificate?")
