"""Benchmark: `fluxnode archive` of one large file to every broker, against sequential copies.

    .venv/bin/python bench/archive.py [--size-mib 100] [--brokers 64] [--baseline-ranks 16]

For each topology (kary:2, fluxnode's default, and kary:32, Flux's default) it starts
`fluxnode start --test-size N`, archives a file of --size-mib MiB of random bytes
(`archive create`, 1 MiB chunks) and extracts it on every rank (`archive extract -r all`),
reporting the wall time of each and the bytes the leader sent (its `content.stats-get`
``load-bytes``). The baseline is sequential copies from one source with the same transport:
a flat tree (kary:0, every rank a child of the leader) and one `archive extract -r RANK`
after another, so the leader sends the whole file to each rank in turn. --baseline-ranks
of them are timed and the time scaled to N copies (the bytes are N times the file by
construction; --baseline-ranks N measures them all).

All brokers run on this one machine, so every copy shares its cores and disk: unpaced, the
wall times say how much work the tree saves the leader, not what N separate nodes would see
(the tree and the copies do the same total work, which two cores must do in turn).
--link-rate R gives every broker `-S content.send-rate=R`: each sends blobs to its children
as over its own link of R bytes/s, as N nodes with one network link each would. With R low
enough that the links, not the shared cores, bound the copies, the wall times compare the
tree with sequential copies as N separate nodes would see them.
Brokers cache at most 16M of blobs each (-S content.cache-size=16M) to bound memory, and
run with torpid_max=120s: file writes run on each broker's event loop, and 64 brokers writing
6.4 GB to one disk get throttled by the kernel long enough (seen at load ~17) for a parent
to call a child lost at the default 30s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fluxnode.testing.instance import Instance

MIB = 1 << 20
TBON = {"torpid_max": "120s"}


def archive(inst: Instance, *args: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "fluxnode", "archive", *args],
                          capture_output=True, text=True,
                          env={**os.environ, "FLUXNODE_URI": inst.uri})
    elapsed = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"fluxnode archive {' '.join(args)} failed: {proc.stderr}")
    return elapsed


def extract(inst: Instance, directory: str, targets: str) -> float:
    """Wall time of one archive.extract, asked of rank 0 by a client already connected (no
    command start-up in the time, for the tree and the baseline alike)."""
    with inst.client(timeout=3600) as c:
        t0 = time.perf_counter()
        answer = c.rpc("archive.extract", {"name": "main", "directory": directory,
                                           "targets": targets}, nodeid=0)
        elapsed = time.perf_counter() - t0
    if answer["errors"]:
        raise SystemExit(f"archive.extract -r {targets}: {answer['errors']}")
    return elapsed


def leader_sent(inst: Instance) -> int:
    return inst.rpc("content.stats-get")["load-bytes"]


def make_file(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        for _ in range(size // MIB):
            f.write(os.urandom(MIB))


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def tree_run(work: Path, src: Path, size: int, brokers: int, topo: str, attrs: dict) -> dict:
    out = work / f"out-{topo.replace(':', '')}"
    with Instance(brokers, topo=topo, attrs=attrs, timeout=120, tbon=TBON) as inst:
        create = archive(inst, "create", "-C", str(src.parent), src.name)
        before = leader_sent(inst)
        took = extract(inst, f"{out}/{{{{rank}}}}", "all")
        sent = leader_sent(inst) - before
    for rank in (0, brokers // 2, brokers - 1):
        if (out / str(rank) / src.name).stat().st_size != size:
            raise SystemExit(f"{topo}: rank {rank} has a wrong copy")
    shutil.rmtree(out)
    return {"topo": topo, "create": create, "extract": took, "sent": sent}


def baseline(work: Path, src: Path, brokers: int, ranks: int,
             attrs: dict) -> tuple[float, int]:
    """Seconds for `ranks` sequential single-rank extracts from the leader (flat tree)."""
    out = work / "out-seq"
    with Instance(brokers, topo="kary:0", attrs=attrs, timeout=120, tbon=TBON) as inst:
        archive(inst, "create", "-C", str(src.parent), src.name)
        before = leader_sent(inst)
        elapsed = 0.0
        for rank in range(1, ranks + 1):
            elapsed += extract(inst, f"{out}/{{{{rank}}}}", str(rank % brokers))
            shutil.rmtree(out)
        sent = leader_sent(inst) - before
    return elapsed, sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=100)
    ap.add_argument("--brokers", type=int, default=64)
    ap.add_argument("--baseline-ranks", type=int, default=16)
    ap.add_argument("--topo", action="append", help="topologies (default kary:2 and kary:32)")
    ap.add_argument("--link-rate", metavar="R",
                    help="content.send-rate of every broker, e.g. 4M (default: unpaced)")
    ap.add_argument("--cache-size", default="16M", help="content.cache-size of every broker")
    args = ap.parse_args()
    size = args.size_mib * MIB
    attrs = {"content.cache-size": args.cache_size}
    if args.link_rate:
        attrs["content.send-rate"] = args.link_rate
    work = Path(tempfile.mkdtemp(prefix="fluxnode-bench-archive-"))
    try:
        src = work / "src" / "data.bin"
        src.parent.mkdir()
        make_file(src, size)
        print(f"file {args.size_mib} MiB, {args.brokers} brokers, load average {loadavg()}, "
              f"{os.cpu_count()} cpus, link rate {args.link_rate or 'unpaced'}, "
              f"cache {args.cache_size}")
        seq_time, seq_sent = baseline(work, src, args.brokers, args.baseline_ranks, attrs)
        per_copy = seq_time / args.baseline_ranks
        seq_total = per_copy * args.brokers
        print(f"sequential copies (kary:0, one rank at a time): {args.baseline_ranks} copies "
              f"{seq_time:.1f} s ({per_copy:.2f} s each, leader sent {seq_sent / size:.2f}x "
              f"the file) -> {args.brokers} copies ~{seq_total:.1f} s, "
              f"{args.brokers}x the file")
        for topo in args.topo or ["kary:2", "kary:32"]:
            r = tree_run(work, src, size, args.brokers, topo, attrs)
            print(f"{topo:>8}: create {r['create']:.1f} s, extract -r all {r['extract']:.1f} s "
                  f"({seq_total / r['extract']:.1f}x faster than sequential), leader sent "
                  f"{r['sent'] / MIB:.0f} MiB = {r['sent'] / size:.2f}x the file "
                  f"({args.brokers * size / max(1, r['sent']):.1f}x less than sequential), "
                  f"load average {loadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
