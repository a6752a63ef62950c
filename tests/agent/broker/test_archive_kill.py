"""A broker killed in the middle of an extract: the re-run fetches only what is missing.

The fault is made deterministic from outside: rank 3 (kary:2, parent rank 1) first
extracts a small archive whose file is the first half of a bigger one, so it holds those
blobs in its cache; then rank 1 is stopped (SIGSTOP), so of the bigger file rank 3 can
write exactly the cached first half and waits for the rest. The test reads the partial
file from disk until that half is there (hashing the chunks itself), kills rank 3
(SIGKILL), lets rank 1 go on, restarts rank 3 (an empty cache) and extracts again: rank 3
must fetch exactly the chunks the test found missing on disk.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

FLUXNODE = [sys.executable, "-m", "fluxnode"]
CHUNK = 64 * 1024


def cli(inst, *args):
    proc = subprocess.run([*FLUXNODE, "archive", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "FLUXNODE_URI": inst.uri})
    assert proc.returncode == 0, proc.stderr
    return proc


def chunk_ok(data: bytes, path, index: int) -> bool:
    with open(path, "rb") as f:
        f.seek(index * CHUNK)
        got = f.read(CHUNK)
    return hashlib.sha1(got).digest() == hashlib.sha1(data[index * CHUNK:(index + 1) * CHUNK]) \
        .digest()


def test_killed_broker_rerun_fetches_only_missing_chunks(tmp_path):
    seed = 4242
    print(f"random seed {seed}")
    data = random.Random(seed).randbytes(8 * CHUNK)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "data.bin").write_bytes(data[: 4 * CHUNK])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "data.bin").write_bytes(data)
    with Instance(4) as inst:
        cli(inst, "create", "-n", "half", "--chunksize", "64K", "-C", str(tmp_path / "half"),
            "data.bin")
        cli(inst, "create", "-n", "full", "--chunksize", "64K", "-C", str(tmp_path / "full"),
            "data.bin")
        cli(inst, "extract", "-n", "half", "-r", "3", "-C", str(tmp_path / "warm"))
        objects = inst.rpc("archive.list", {"name": "full"})["archive"]
        out = tmp_path / "out"
        partial = out / ".data.bin.archive-partial"
        parent = inst.pids[1]
        os.kill(parent, signal.SIGSTOP)
        try:
            # straight to rank 3 (its parent is stopped), the index given inline
            with inst.client(3) as c:
                c.send("archive.extract", {"archive": objects, "directory": str(out),
                                           "targets": "3"}, nodeid=3)
                wait_for(lambda: partial.exists() and all(
                    chunk_ok(data, partial, i) for i in range(4)),
                    timeout=30, what="the cached half of data.bin on disk")
                inst.kill(3)
        finally:
            os.kill(parent, signal.SIGCONT)
        missing = [i for i in range(8)
                   if partial.stat().st_size < (i + 1) * CHUNK or not chunk_ok(data, partial, i)]
        assert missing == [4, 5, 6, 7]
        assert not (out / "data.bin").exists()
        inst.restart(3)
        # the online set may still hold the killed rank 3 (its parent has not noticed yet):
        # wait until the new one answers through the tree
        wait_for(lambda: inst.rpc("broker.ping", nodeid=3, timeout=2), timeout=30,
                 what="the restarted rank 3 to answer through rank 1")
        answer = cli(inst, "extract", "-n", "full", "-r", "3", "-C", str(out), "-v").stderr
        assert answer.strip() == (f"rank 3: 1 written, 0 skipped, {len(missing)} blobs loaded, "
                                  f"{len(missing) * CHUNK} bytes")
        assert inst.rpc("content.stats-get", nodeid=3)["fetches"] == len(missing)
        assert (out / "data.bin").read_bytes() == data
        assert not partial.exists()
