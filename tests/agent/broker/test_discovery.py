"""Node resource discovery: the real machine, prepared sysfs/proc trees, and override files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fluxnode.agent.broker import discovery as resources
from fluxnode.agent.broker.discovery import ResourceDiscoveryError
from fluxnode.broker_conf.rv1 import NodeResources


def test_this_machine():
    node = resources.discover(hostname="me", rank=3)
    assert node.rank == 3 and node.hostname == "me"
    assert node.cores == sorted(os.sched_getaffinity(0))
    assert node.sockets >= 1 and len(node.core_sockets) == len(node.cores)
    with open("/proc/meminfo") as f:
        total_kb = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    assert node.memory_mib == total_kb // 1024


def test_cpu_affinity_is_respected():
    """A process pinned to one CPU offers only that CPU (as in a cpuset-limited container)."""
    cpu = min(os.sched_getaffinity(0))
    code = (
        f"import os, json; os.sched_setaffinity(0, {{{cpu}}}); "
        "from fluxnode.agent.broker.discovery import discover; "
        "print(json.dumps(discover(hostname='x').cores))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert json.loads(out) == [cpu]


def make_tree(
    tmp_path, packages: dict[int, int] | None, cpuinfo: str | None, meminfo: str, gpus=()
):
    sys_cpu = tmp_path / "sys"
    for cpu, pkg in (packages or {}).items():
        d = sys_cpu / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{pkg}\n")
    sys_cpu.mkdir(exist_ok=True)
    (tmp_path / "cpuinfo").write_text(cpuinfo or "")
    (tmp_path / "meminfo").write_text(meminfo)
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in gpus:
        (dev / name).write_text("")
    return {
        "sys_cpu": sys_cpu,
        "cpuinfo": tmp_path / "cpuinfo",
        "meminfo": tmp_path / "meminfo",
        "dev": dev,
    }


def test_sockets_from_sysfs_and_gpus_from_dev(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    # alternate packages 0/1 by cpu parity, as on many two-socket Intel machines
    tree = make_tree(tmp_path, {c: c % 2 for c in cpus}, None, "MemTotal:       16384000 kB\n",
                     gpus=("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"))
    node = resources.discover(hostname="n", **tree)
    assert node.memory_mib == 16000
    assert node.gpus == [0, 1]
    expected_sockets = len({c % 2 for c in cpus})
    assert node.sockets == expected_sockets
    if expected_sockets == 2:
        assert node.socket_cores(0) == [c for c in cpus if c % 2 == 0]


def test_sockets_from_cpuinfo_when_sysfs_missing(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    info = "\n\n".join(
        f"processor\t: {c}\nphysical id\t: {7 if c >= max(cpus) and len(cpus) > 1 else 3}"
        for c in cpus
    )
    tree = make_tree(tmp_path, None, info + "\n", "MemTotal: 2048 kB\n")
    node = resources.discover(hostname="n", **tree)
    assert node.sockets == (2 if len(cpus) > 1 else 1)
    assert node.core_sockets[-1] == node.sockets - 1  # sparse package ids renumbered
    assert node.memory_mib == 2


def test_single_socket_fallback(tmp_path):
    tree = make_tree(tmp_path, None, "garbage", "nothing useful\n")
    node = resources.discover(hostname="n", **tree)
    assert node.sockets == 1 and node.memory_mib == 0 and node.gpus == []


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "o.json",
            '{"cores": 4, "sockets": 2, "gpus": 1, "memory_mib": 8192, "hostname": "node7"}',
            NodeResources(
                rank=2, hostname="node7", cores=[0, 1, 2, 3], gpus=[0], sockets=2, memory_mib=8192
            ),
        ),
        (
            "o.toml",
            'cores = "0-1,4"\nmemory_mib = 100\n',
            NodeResources(rank=2, hostname="given", cores=[0, 1, 4], memory_mib=100),
        ),
        (
            "o.json",
            '{"cores": [3, 1], "gpus": "0-1", "sockets": 2, "core_sockets": [1, 0]}',
            NodeResources(
                rank=2, hostname="given", cores=[1, 3], gpus=[0, 1], sockets=2, core_sockets=[0, 1]
            ),
        ),
    ],
)
def test_override(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    assert resources.discover(path, hostname="given", rank=2) == expected


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("o.json", "{bad json", "invalid JSON"),
        ("o.toml", "cores = = 1", "invalid TOML"),
        ("o.json", "[1, 2]", "must be an object"),
        ("o.json", '{"cpus": 4}', "unknown key 'cpus'"),
        ("o.json", '{"cores": -1}', "cores: count must be >= 0"),
        ("o.json", '{"cores": "0-"}', "cores: invalid idset"),
        ("o.json", '{"gpus": true}', "gpus: must be a count"),
        ("o.json", '{"sockets": 0}', "sockets must be an integer >= 1"),
        ("o.json", '{"memory_mib": "8G"}', "memory_mib must be a non-negative integer"),
        ("o.json", '{"hostname": 5}', "hostname: must be a string"),
    ],
)
def test_bad_override_names_file_and_problem(tmp_path, name, text, fragment):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ResourceDiscoveryError) as exc:
        resources.discover(path, hostname="h")
    assert str(exc.value).startswith(str(path)) and fragment in str(exc.value)


def test_missing_override(tmp_path):
    with pytest.raises(ResourceDiscoveryError, match="cannot read resource override"):
        resources.discover(tmp_path / "nope.json")


# `nvidia-smi -L` on a 4-GPU V100 node, as captured in public notes (one line per GPU:
# "GPU <index>: <product name> (UUID: GPU-<uuid>)").
NVIDIA_SMI_L = """\
GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-ccf578c6-5369-9ff4-e1c2-d4c0c9d4d338)
GPU 1: Tesla V100-SXM2-16GB (UUID: GPU-7bbcd9e7-b1e2-5e53-fb9a-6d27e364dd40)
GPU 2: Tesla V100-SXM2-16GB (UUID: GPU-0b610645-cc68-d906-0b75-f88e8d241313)
GPU 3: Tesla V100-SXM2-16GB (UUID: GPU-362ffce9-16cd-679a-9e46-0da23373846d)
"""
# What nvidia-smi prints (exit code 9) on a node whose driver is not loaded.
NVIDIA_SMI_NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


def stub_nvidia_smi(bindir, stdout: str, code: int = 0):
    """An `nvidia-smi` executable that answers `-L` (`--list-gpus`) like the real one and refuses
    anything else
    (so a change in how discovery calls it fails here instead of passing on made-up output)."""
    bindir.mkdir()
    (bindir / "listing").write_text(stdout)
    exe = bindir / "nvidia-smi"
    exe.write_text(f"""#!/bin/sh
if [ "$*" != "-L" ] && [ "$*" != "--list-gpus" ]; then
    echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help." >&2
    exit 2
fi
cat '{bindir / "listing"}'
exit {code}
""")
    exe.chmod(0o755)


def gpus_with_path(tmp_path, bindir) -> list[int]:
    """Discovery in a fresh process whose PATH starts with `bindir` and whose /dev has no GPU
    nodes."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").write_text("")  # the control node is not a GPU
    code = ("import json, pathlib; from fluxnode.agent.broker.discovery import discover; "
            f"print(json.dumps(discover(hostname='g', dev=pathlib.Path({str(dev)!r})).gpus))")
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    return json.loads(out.stdout)


def test_gpus_from_nvidia_smi_when_dev_has_no_device_nodes(tmp_path):
    stub_nvidia_smi(tmp_path / "bin", NVIDIA_SMI_L)
    assert gpus_with_path(tmp_path, tmp_path / "bin") == [0, 1, 2, 3]


def test_nvidia_smi_without_a_driver_means_no_gpus(tmp_path):
    stub_nvidia_smi(tmp_path / "bin", NVIDIA_SMI_NO_DRIVER, code=9)
    assert gpus_with_path(tmp_path, tmp_path / "bin") == []
