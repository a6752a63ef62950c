"""Issue 32: what the fork launcher does before it forks so that its brokers share more of
its pages. Each check forks a child of this process, as the launcher forks a broker, and
reads the child's own `Private_Dirty` (/proc/self/smaps_rollup): the pages it copied from
its parent or made, before and after it allocates. The parent's heap is first left the way
the launcher's imports leave it, full of free blocks scattered over many pages."""

from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest
from fluxnode.agent.broker import launcher

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps_rollup")


def private_dirty_kib() -> int:
    text = Path("/proc/self/smaps_rollup").read_text()
    return int(text.split("Private_Dirty:")[1].split()[0])


def child_copies(count: int, make) -> int:
    """KiB of private pages a forked child adds by allocating `count` objects of `make()`."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: measure, allocate into a list sized once, measure again
        code = 1
        try:
            os.close(read_end)
            kept: list[object] = [None] * count
            before = private_dirty_kib()
            for i in range(count):
                kept[i] = make()
            os.write(write_end, str(private_dirty_kib() - before).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as f:
            answer = f.read()
    finally:
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and answer, "the child did not answer"
    return int(answer)


def scattered(make, count: int, every: int) -> list[object]:
    """`count` objects of `make()`, with every `every`-th freed again: free blocks (or
    chunks) spread over all their pages, as imports leave them."""
    kept = [make() for _ in range(count)]
    del kept[::every]
    return kept


def test_after_the_pool_fill_a_forked_childs_small_objects_go_to_pools_of_its_own():
    # bytes(20) takes 53 bytes, obmalloc's 64-byte class: 4 free blocks on every page
    kept = scattered(lambda: bytes(20), 64_000, 16)
    try:
        scattered_kib = child_copies(3_000, lambda: bytes(20))
        launcher._fill_pools()
        packed_kib = child_copies(3_000, lambda: bytes(20))
    finally:
        launcher._POOL_FILL.clear()
        del kept
    # 3,000 blocks of 64 bytes are 47 pages packed; in the scattered free blocks, ~750
    assert packed_kib * 4 < scattered_kib, (packed_kib, scattered_kib)


def small_free_chunks() -> int:
    """Free chunks of at most 1,040 bytes in the main arena of glibc's malloc, from its own
    report (malloc_info), as the launcher reads it."""
    libc = ctypes.CDLL(None)
    libc.fdopen.restype = ctypes.c_void_p
    with tempfile.TemporaryFile() as out:
        stream = libc.fdopen(os.dup(out.fileno()), b"w")
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        out.seek(0)
        report = out.read().decode()
    main_arena = report.split('<heap nr="1">')[0].split("</sizes>")[0]
    return sum(int(count) for size, count in re.findall(
        r'<size from="(\d+)" to="\d+" total="\d+" count="(\d+)"/>', main_arena)
        if int(size) - 1 <= launcher.TCACHE_MAX_CHUNK)


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_info"), reason="glibc's malloc")
def test_the_heap_fill_takes_the_small_free_chunks_a_forked_child_would_copy():
    # a list of 80 items is a malloc of 640 bytes for its items (over obmalloc's 512):
    # one chunk in 8 freed, a thousand free chunks spread over 1,300 pages
    kept = scattered(lambda: [None] * 80, 8_000, 8)
    try:
        assert small_free_chunks() >= 900
        launcher._fill_heap()
        launcher._fill_heap()  # as the launcher does: the first round's own leftovers
        assert small_free_chunks() < 50
    finally:
        launcher._HEAP_FILL.clear()  # (the chunks stay taken: a few hundred KiB)
        del kept


def test_settling_the_type_cache_drops_its_references_to_attribute_names():
    class Probe:
        pass

    name = "".join(["settle_", "probe_attribute"])  # made here: no other reference to it
    setattr(Probe, name, 1)
    assert getattr(Probe(), name) == 1  # the lookup caches (Probe's version, name)
    cached = sys.getrefcount(name)
    launcher._settle_type_cache()
    assert sys.getrefcount(name) < cached
    # and lookups still see what classes hold, changed after as before
    setattr(Probe, name, 2)
    assert getattr(Probe(), name) == 2
