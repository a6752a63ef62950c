"""The leader's R as the commands print it stays what it was before the leader kept R as
its nodes and wrote the JGF only when asked (issue 32).

The oracle is a recording: `data/resource_5.txt` is what main at 8d2563a printed for the
same instance (`fluxnode resource R`, then an allocation, `resource list` and `resource
status`), the leader then holding R with its JGF built at every join. Five nodes that
differ: two of the --test-resources (2 sockets, memory), one with 3 sockets and cores and
GPUs placed out of order, one with 4 GPUs and 1 MiB of memory, one whose cores are 3,5,7
on one socket without memory (`data/resource_nodes/`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"


def test_resource_R_list_and_status_print_the_bytes_they_printed_before():
    fluxnode = f"{sys.executable} -m fluxnode"
    p = subprocess.run(
        [sys.executable, "-m", "fluxnode", "start", "--test-size", "5",
         "--test-hosts", "n[0-1],gpu7,n[3-4]",
         "--test-resources", "cores=2,sockets=2,memory_mib=3000",
         "--resource-override-dir", str(DATA / "resource_nodes"), "--",
         "sh", "-ec", f"{fluxnode} resource R; "
                      f"{fluxnode} alloc --slots 2 --cores-per-slot 2 >/dev/null; "
                      f"{fluxnode} resource list; {fluxnode} resource status"],
        capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    want = (DATA / "resource_5.txt").read_text()
    assert p.stdout.splitlines()[0] == want.splitlines()[0]  # R, with its JGF
    assert p.stdout == want
