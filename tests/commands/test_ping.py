"""`fluxnode ping` (fluxnode/commands/ping.py): its lines as they come."""

from __future__ import annotations

import os
import select
import subprocess
import sys

import pytest

from fluxnode.testing.instance import Instance


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    with Instance(2, tmp_path_factory.mktemp("ping"), modules=None) as inst:
        yield inst


def test_each_answer_is_written_when_it_comes(inst):
    """One line per answer, flushed as it is written (as click.echo did, issue 32): the first
    answer's line can be read while the command waits its interval (an hour) before the
    next ping. Written without a flush, it would stay in the command's buffer."""
    # (not unbuffered, as a shell runs it: PYTHONUNBUFFERED would flush every write)
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("FLUXNODE_") and k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fluxnode", "ping", "--interval", "3600", "--uri", inst.uri,
         "1"], stdout=subprocess.PIPE, env=clean)
    try:
        readable, _, _ = select.select([proc.stdout], [], [], 60)
        assert readable, "no line within 60 s of the first ping"
        line = proc.stdout.readline()
        assert line.startswith(b"1!broker.ping pad=0 seq=0 time="), line
        assert line.endswith(b"!0!1)\n"), line
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
