"""`fluxnode archive` and the content store against real brokers.

The oracles come from outside the code under test: file hashes, modes and link targets
are read from the source tree with hashlib/os; blobrefs are recomputed with hashlib; how
many blobs the leader should serve follows from the tree shape (kary:2: rank 0 has two
children) and the chunk count. Random file contents print their seed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fluxnode.agent.broker.client import RPCError

from fluxnode.testing.instance import Instance

FLUXNODE = [sys.executable, "-m", "fluxnode"]
CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def inst7():
    """7 brokers, kary:2: 0 -> {1, 2}, 1 -> {3, 4}, 2 -> {5, 6}."""
    with Instance(7) as inst:
        yield inst


def cli(inst: Instance, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*FLUXNODE, "archive", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "FLUXNODE_URI": inst.uri})


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr
    return proc


def random_bytes(n: int, seed: int) -> bytes:
    print(f"random seed {seed}")
    return random.Random(seed).randbytes(n)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(root: Path) -> dict[str, tuple]:
    """What the test promises survives: per path its type, mode and content hash or target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("f", stat.S_IMODE(st.st_mode), st.st_size, sha256(p))
    return out


def stats(inst: Instance, rank: int) -> dict:
    return inst.rpc("content.stats-get", nodeid=rank)


# -- round trip --------------------------------------------------------------------------
def test_round_trip_keeps_contents_modes_symlinks_empty_files_and_directories(inst7, tmp_path):
    src = tmp_path / "src"
    (src / "top" / "sub" / "deeper").mkdir(parents=True)
    (src / "top" / "big.bin").write_bytes(random_bytes(5 * CHUNK + 123, seed=15))
    (src / "top" / "small.txt").write_text("hello\n")
    (src / "top" / "empty").write_bytes(b"")
    (src / "top" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(src / "top" / "run.sh", 0o755)
    os.chmod(src / "top" / "small.txt", 0o600)
    (src / "top" / "link").symlink_to("small.txt")
    (src / "top" / "dangling").symlink_to("/nonexistent/target")
    os.chmod(src / "top" / "sub", 0o750)
    os.chmod(src / "top" / "sub" / "deeper", 0o500)  # read-only: contents must still land
    (src / "lone.txt").write_text("x" * 2000)
    expected = tree(src)

    ok(cli(inst7, "create", "--name", "rt", "--chunksize", "64K", "-C", str(src), "top",
           "lone.txt"))
    out = tmp_path / "out"
    ok(cli(inst7, "extract", "--name", "rt", "-C", f"{out}/{{{{rank}}}}"))
    for rank in range(7):
        assert tree(out / str(rank)) == expected, f"rank {rank}"
    listing = ok(cli(inst7, "list", "--name", "rt", "-l")).stdout.splitlines()
    assert "f 0600          6 top/small.txt" in listing
    assert "l 0777          0 top/link -> small.txt" in listing
    assert "f 0644          0 top/empty" in listing
    assert "d 0500          0 top/sub/deeper" in listing
    ok(cli(inst7, "remove", "--name", "rt"))


def test_large_file_is_chunked_into_blobs_named_by_their_sha1(inst7, tmp_path):
    data = random_bytes(7 * CHUNK + 5, seed=1507)
    (tmp_path / "f.bin").write_bytes(data)
    ok(cli(inst7, "create", "-n", "chunks", "--chunksize", "64K", "-C", str(tmp_path), "f.bin"))
    obj = inst7.rpc("archive.list", {"name": "chunks"})["archive"][0]
    assert obj["encoding"] == "blobvec"
    want = [[off, len(data[off:off + CHUNK]),
             "sha1-" + hashlib.sha1(data[off:off + CHUNK]).hexdigest()]
            for off in range(0, len(data), CHUNK)]
    assert obj["data"] == want and len(want) == 8
    blob = inst7.rpc("content.load", {"blobref": want[3][2]}, nodeid=6)
    import base64

    assert base64.b64decode(blob["data"]) == data[3 * CHUNK:4 * CHUNK]
    ok(cli(inst7, "extract", "-n", "chunks", "-r", "5", "-C", str(tmp_path / "x")))
    assert (tmp_path / "x" / "f.bin").read_bytes() == data
    ok(cli(inst7, "remove", "-n", "chunks"))


# -- fan-out -----------------------------------------------------------------------------
def test_leader_sends_each_blob_once_per_child_not_once_per_node(inst7, tmp_path):
    data = random_bytes(12 * CHUNK, seed=77)
    (tmp_path / "f.bin").write_bytes(data)
    ok(cli(inst7, "create", "-n", "fan", "--chunksize", "64K", "-C", str(tmp_path), "f.bin"))
    before = {r: stats(inst7, r) for r in (0, 1, 2)}
    ok(cli(inst7, "extract", "-n", "fan", "-C", f"{tmp_path}/out/{{{{rank}}}}", "-r", "1-6"))
    after = {r: stats(inst7, r) for r in (0, 1, 2)}
    chunks = 12
    sent = {r: after[r]["loads"] - before[r]["loads"] for r in (0, 1, 2)}
    sent_bytes = after[0]["load-bytes"] - before[0]["load-bytes"]
    # rank 0 has two children; sending once per node would be 6 * chunks
    assert sent[0] == 2 * chunks, sent
    assert sent_bytes == 2 * len(data)
    assert sent[1] == 2 * chunks and sent[2] == 2 * chunks, sent  # each has two children too
    for rank in range(1, 7):
        assert (tmp_path / "out" / str(rank) / "f.bin").read_bytes() == data
    assert not (tmp_path / "out" / "0").exists()
    ok(cli(inst7, "remove", "-n", "fan"))


def test_rerun_skips_files_in_place(inst7, tmp_path):
    (tmp_path / "f.bin").write_bytes(random_bytes(3 * CHUNK, seed=3))
    ok(cli(inst7, "create", "-n", "again", "--chunksize", "64K", "-C", str(tmp_path), "f.bin"))
    target = f"{tmp_path}/out/{{{{rank}}}}"
    ok(cli(inst7, "extract", "-n", "again", "-r", "4", "-C", target))
    second = ok(cli(inst7, "extract", "-n", "again", "-r", "4", "-C", target, "-v")).stderr
    assert second.strip() == "rank 4: 0 written, 1 skipped, 0 blobs loaded, 0 bytes"
    ok(cli(inst7, "remove", "-n", "again"))


# -- paths that would escape -C ----------------------------------------------------------
@pytest.mark.parametrize("path,why", [
    ("/etc/passwd", "absolute paths are not allowed"),
    ("../outside", "'..' is not allowed"),
    ("a/../../outside", "'..' is not allowed"),
])
def test_create_refuses_paths_that_escape(inst7, tmp_path, path, why):
    proc = cli(inst7, "create", "-n", "esc", "-C", str(tmp_path), path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"Error: archive create: {path}: " + {
        "absolute paths are not allowed": "absolute paths are not allowed (it would escape "
                                          "the target directory)",
        "'..' is not allowed": "'..' is not allowed (it would escape the target directory)",
    }[why]


@pytest.mark.parametrize("objects,message", [
    ([{"path": "/tmp/x", "type": "f", "mode": 420, "size": 0}],
     "/tmp/x: absolute paths are not allowed"),
    ([{"path": "a/../../x", "type": "f", "mode": 420, "size": 0}],
     "a/../../x: '..' is not allowed"),
    ([{"path": "ln", "type": "l", "mode": 511, "encoding": "utf-8", "data": "/tmp"},
      {"path": "ln/evil", "type": "f", "mode": 420, "size": 0}],
     "ln/evil: below the archive's symlink ln"),
])
def test_service_refuses_an_index_that_escapes_where_it_is_kept_and_where_it_is_used(
        inst7, tmp_path, objects, message):
    with pytest.raises(RPCError) as exc:
        inst7.rpc("archive.create", {"name": "esc", "archive": objects})
    assert exc.value.errnum == errno.EINVAL and message in exc.value.errstr
    # a client that skips archive.create and hands a broker an index directly
    with pytest.raises(RPCError) as exc:
        inst7.rpc("archive.extract", {"archive": objects, "directory": str(tmp_path / "d"),
                                      "targets": "3"}, nodeid=3)
    assert exc.value.errnum == errno.EINVAL and message in exc.value.errstr
    assert not (tmp_path / "d").exists()


def test_extract_never_writes_through_a_symlink_on_disk(inst7, tmp_path):
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.txt").write_text("payload")
    ok(cli(inst7, "create", "-n", "sym", "-C", str(src), "d"))
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "d").symlink_to(outside)  # someone planted d -> outside
    proc = cli(inst7, "extract", "-n", "sym", "-r", "2", "-C", str(dest))
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"fluxnode-archive: node2 (rank 2): {dest}/d: refused: is a "
                                   "symlink on disk, the archive has a directory there")
    assert list(outside.iterdir()) == []
    # deeper: the planted link is a parent of the path written
    ok(cli(inst7, "create", "-n", "sym2", "-C", str(src), "d/f.txt"))
    proc = cli(inst7, "extract", "-n", "sym2", "-r", "2", "-C", str(dest))
    assert proc.returncode == 1
    assert f"{dest}/d/f.txt: refused: {dest}/d is a symlink" in proc.stderr
    assert list(outside.iterdir()) == []
    ok(cli(inst7, "remove", "-n", "sym"))
    ok(cli(inst7, "remove", "-n", "sym2"))


# -- integrity -----------------------------------------------------------------------------
def test_a_damaged_blob_is_refused_on_extract(inst7, tmp_path):
    data = random_bytes(2 * CHUNK, seed=99)
    (tmp_path / "f.bin").write_bytes(data)
    ok(cli(inst7, "create", "-n", "bad", "--chunksize", "64K", "-C", str(tmp_path), "f.bin"))
    ref = "sha1-" + hashlib.sha1(data[CHUNK:]).hexdigest()
    db = sqlite3.connect(inst7.statedir(0) / "content.sqlite")  # the fault, from outside
    with db:
        db.execute("UPDATE objects SET object = ? WHERE hash = ?", (b"x" * CHUNK, ref))
    db.close()
    leaf = cli(inst7, "extract", "-n", "bad", "-r", "6", "-C", str(tmp_path / "leaf"))
    assert leaf.returncode == 1
    assert f"{ref}: the parent sent a blob that does not match its hash" in leaf.stderr
    leader = cli(inst7, "extract", "-n", "bad", "-r", "0", "-C", str(tmp_path / "leader"))
    assert leader.returncode == 1
    assert f"f.bin: blob {ref} failed its hash check" in leader.stderr
    for d in ("leaf", "leader"):
        assert not (tmp_path / d / "f.bin").exists()
    ok(cli(inst7, "remove", "-n", "bad"))


# -- list / remove / bad input -----------------------------------------------------------
def test_remove_drops_the_index_and_only_unshared_blobs(inst7, tmp_path):
    a, b = random_bytes(2 * CHUNK, seed=5), random_bytes(CHUNK, seed=6)
    (tmp_path / "a").write_bytes(a)
    (tmp_path / "b").write_bytes(b)
    before = stats(inst7, 0)["count"]
    ok(cli(inst7, "create", "-n", "one", "--chunksize", "64K", "-C", str(tmp_path), "a"))
    ok(cli(inst7, "create", "-n", "two", "--chunksize", "64K", "-C", str(tmp_path), "a", "b"))
    assert stats(inst7, 0)["count"] == before + 3
    assert inst7.rpc("archive.list", {"all": True})["names"] == ["one", "two"]
    ok(cli(inst7, "remove", "-n", "two"))
    assert stats(inst7, 0)["count"] == before + 2  # b's blob went, a's are still used by one
    proc = cli(inst7, "list", "-n", "two")
    assert (proc.returncode, proc.stderr.strip()) == (1, "Error: archive.list: no archive named "
                                                         "'two'")
    assert ok(cli(inst7, "list", "-n", "one")).stdout == "a\n"
    ok(cli(inst7, "extract", "-n", "one", "-r", "5", "-C", str(tmp_path / "x")))
    assert (tmp_path / "x" / "a").read_bytes() == a
    proc = cli(inst7, "remove", "-n", "two")
    assert (proc.returncode, proc.stderr.strip()) == (1, "Error: archive.remove: no archive "
                                                         "named 'two'")
    ok(cli(inst7, "remove", "-n", "two", "-f"))
    ok(cli(inst7, "remove", "-n", "one"))
    assert stats(inst7, 0)["count"] == before


def test_bad_input_gets_one_clear_line(inst7, tmp_path):
    proc = cli(inst7, "extract", "-n", "nope", "-C", str(tmp_path))
    assert (proc.returncode, proc.stderr) == (1, "Error: archive.extract: no archive named "
                                                 "'nope'\n")
    proc = cli(inst7, "list", "-n", "bad/name")
    assert proc.returncode == 2 and "bad archive name 'bad/name'" in proc.stderr
    with pytest.raises(RPCError) as exc:
        inst7.rpc("content.load", {"blobref": "sha1-xyz"}, nodeid=4)
    assert exc.value.errnum == errno.EINVAL
    assert exc.value.errstr == ("content.load: bad blobref 'sha1-xyz' (expected sha1-<40 hex> "
                                "or sha256-<64 hex>)")
    missing = "sha1-" + "0" * 40
    with pytest.raises(RPCError) as exc:  # asked of a leaf: the miss travels up to the leader
        inst7.rpc("content.load", {"blobref": missing}, nodeid=4)
    assert exc.value.errnum == errno.ENOENT
    assert exc.value.errstr == f"content.load: {missing}: no such blob"
    with pytest.raises(RPCError) as exc:
        inst7.rpc("archive.create", {"name": "ghost", "archive": [
            {"path": "f", "type": "f", "mode": 420, "size": 5, "encoding": "blobvec",
             "data": [[0, 5, missing]]}]})
    assert exc.value.errstr == f"archive.create: f: blob {missing} is not in the content store"
    (tmp_path / "f").write_text("x")
    ok(cli(inst7, "create", "-n", "tgt", "-C", str(tmp_path), "f"))
    proc = cli(inst7, "extract", "-n", "tgt", "-r", "9", "-C", str(tmp_path / "o"))
    assert proc.stderr == "Error: archive.extract: targets: no such rank 9 (instance size 7)\n"
    # a file in the way is not replaced unless asked
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "f").write_text("other")
    proc = cli(inst7, "extract", "-n", "tgt", "-r", "3", "-C", str(tmp_path / "o"))
    assert proc.returncode == 1
    assert proc.stderr == (f"fluxnode-archive: node3 (rank 3): {tmp_path}/o/f: exists with "
                           "other content (use --overwrite)\n")
    ok(cli(inst7, "extract", "-n", "tgt", "-r", "3", "--overwrite", "-C", str(tmp_path / "o")))
    assert (tmp_path / "o" / "f").read_text() == "x"
    ok(cli(inst7, "remove", "-n", "tgt"))
    assert inst7.rpc("broker.ping", nodeid=6)  # the brokers keep serving


def test_send_rate_paces_what_a_broker_sends_its_children(tmp_path):
    """content.send-rate=1M: rank 0's answers to its children queue on one 1 MiB/s link, so
    sending 512 KiB to one child takes at least 0.5 s and to both at least 1 s (lower bounds
    only: pacing makes them certain, load can only add)."""
    with Instance(3, attrs={"content.send-rate": "1M"}) as inst:
        for n, (targets, least) in enumerate((("1", 0.5), ("1-2", 1.0))):
            data = random_bytes(8 * CHUNK, seed=2311 + n)
            (tmp_path / f"f{n}.bin").write_bytes(data)
            ok(cli(inst, "create", "-n", f"paced{n}", "--chunksize", "64K", "-C",
                   str(tmp_path), f"f{n}.bin"))
            out = tmp_path / f"out{n}"
            before = stats(inst, 0)["load-bytes"]
            t0 = time.monotonic()
            ok(cli(inst, "extract", "-n", f"paced{n}", "-r", targets, "-C",
                   f"{out}/{{{{rank}}}}"))
            took = time.monotonic() - t0
            assert took >= least, (targets, took)
            sent = stats(inst, 0)["load-bytes"] - before
            assert sent == len(data) * len(targets.split("-"))
            for rank in range(1, 1 + len(targets.split("-"))):
                assert (out / str(rank) / f"f{n}.bin").read_bytes() == data
