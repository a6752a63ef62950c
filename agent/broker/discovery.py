"""Discover what this node offers a scheduler: cores, sockets, memory and GPUs.

Cores are the CPUs this process may run on (``os.sched_getaffinity``), so a broker in a
container with a cpuset only offers the cpuset. Sockets come from sysfs
(``/sys/devices/system/cpu/cpuN/topology/physical_package_id``), falling back to
``/proc/cpuinfo`` ``physical id`` and then to one socket. Memory is ``MemTotal`` from
``/proc/meminfo`` in MiB. GPUs are ``/dev/nvidia<N>`` device nodes, or ``nvidia-smi -L``
when no device node is visible.

An override file (JSON or TOML) replaces discovery, for tests and for describing a
node by hand::

    {"cores": 4, "sockets": 2, "gpus": 1, "memory_mib": 8192, "hostname": "node7"}

``cores``/``gpus`` may be a count, a list of ids, or an RFC 22 idset string ("0-3").
"""

from __future__ import annotations

import _socket  # not `socket`: see connector.py
import json
import os
import re
from pathlib import Path
from typing import Any

from fluxnode.broker_conf import idset
from fluxnode.broker_conf.rv1 import NodeResources, RError

__all__ = ["discover", "ResourceDiscoveryError", "SYS_CPU", "PROC_CPUINFO", "PROC_MEMINFO"]

SYS_CPU = Path("/sys/devices/system/cpu")
PROC_CPUINFO = Path("/proc/cpuinfo")
PROC_MEMINFO = Path("/proc/meminfo")
DEV = Path("/dev")

_OVERRIDE_KEYS = (
    "cores",
    "sockets",
    "gpus",
    "memory_mib",
    "hostname",
    "core_sockets",
    "gpu_sockets",
)


class ResourceDiscoveryError(ValueError):
    """Resources could not be determined (bad override file, unreadable /proc ...)."""


def _cpu_sockets(cpus: list[int], sys_cpu: Path, cpuinfo: Path) -> dict[int, int]:
    """Physical package id of each cpu, from sysfs, else /proc/cpuinfo; {} if neither knows."""
    packages: dict[int, int] = {}
    for cpu in cpus:
        try:
            packages[cpu] = int(
                (sys_cpu / f"cpu{cpu}" / "topology" / "physical_package_id").read_text().strip()
            )
        except (OSError, ValueError):
            packages = {}
            break
    if packages and all(p >= 0 for p in packages.values()):
        return packages
    packages = {}
    try:
        text = cpuinfo.read_text()
    except OSError:
        return {}
    for block in text.split("\n\n"):
        fields = dict(
            (k.strip(), v.strip())
            for k, _, v in (line.partition(":") for line in block.splitlines())
            if k.strip()
        )
        if "processor" in fields and "physical id" in fields:
            try:
                packages[int(fields["processor"])] = int(fields["physical id"])
            except ValueError:
                continue
    if all(c in packages for c in cpus):
        return {c: packages[c] for c in cpus}
    return {}


def _memory_mib(meminfo: Path) -> int:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                parts = line.split()
                value = int(parts[1])
                unit = parts[2] if len(parts) > 2 else "kB"
                factor = {"kB": 1024, "mB": 1 << 20, "gB": 1 << 30, "B": 1}.get(unit, 1024)
                return value * factor // (1 << 20)
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def _gpus(dev: Path) -> list[int]:
    ids = []
    try:
        for entry in dev.iterdir():
            m = re.fullmatch(r"nvidia(\d+)", entry.name)
            if m:
                ids.append(int(m.group(1)))
    except OSError:
        pass
    if ids:
        return sorted(ids)
    # looked up by hand: shutil (and the compression modules it loads) is not worth its
    # memory in every broker for one `which`
    smi = next((p for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d
                for p in (os.path.join(d, "nvidia-smi"),) if os.access(p, os.X_OK)), None)
    if smi is None:
        return []
    import subprocess  # here, not at the top: most nodes have no GPU to ask about

    try:
        out = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(m.group(1)) for m in re.finditer(r"^GPU (\d+):", out, re.MULTILINE)]


def _ids(value: Any, key: str, source: Path) -> list[int]:
    if isinstance(value, bool):
        raise ResourceDiscoveryError(
            f"{source}: {key}: must be a count, a list of ids or an idset string, not a boolean"
        )
    if isinstance(value, int):
        if value < 0:
            raise ResourceDiscoveryError(f"{source}: {key}: count must be >= 0, not {value}")
        return list(range(value))
    if isinstance(value, str):
        try:
            return idset.decode(value)
        except idset.IdsetError as exc:
            raise ResourceDiscoveryError(f"{source}: {key}: {exc}") from None
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        return list(value)
    raise ResourceDiscoveryError(
        f"{source}: {key}: must be a count, a list of ids or an idset string, not {value!r}"
    )


def _read_override(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ResourceDiscoveryError(
            f"{path}: cannot read resource override: {exc.strerror or exc}"
        ) from None
    import tomllib

    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResourceDiscoveryError(
            f"{path}: invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ResourceDiscoveryError(f"{path}: invalid TOML: {exc}") from None
    if not isinstance(data, dict):
        raise ResourceDiscoveryError(
            f"{path}: resource override must be an object like {{\"cores\": 4}}"
        )
    unknown = sorted(set(data) - set(_OVERRIDE_KEYS))
    if unknown:
        raise ResourceDiscoveryError(
            f"{path}: unknown key {unknown[0]!r} (known: {', '.join(_OVERRIDE_KEYS)})"
        )
    return data


def _from_override(path: Path, rank: int, hostname: str | None) -> NodeResources:
    data = _read_override(path)
    name = data.get("hostname", hostname or _socket.gethostname())
    if not isinstance(name, str):
        raise ResourceDiscoveryError(f"{path}: hostname: must be a string, not {name!r}")
    try:
        return NodeResources(
            rank=rank,
            hostname=name,
            cores=_ids(data.get("cores", 1), "cores", path),
            gpus=_ids(data.get("gpus", 0), "gpus", path),
            sockets=data.get("sockets", 1),
            memory_mib=data.get("memory_mib", 0),
            core_sockets=data.get("core_sockets", []),
            gpu_sockets=data.get("gpu_sockets", []),
        )
    except RError as exc:
        raise ResourceDiscoveryError(f"{path}: {exc}") from None


def discover(
    override: str | Path | None = None,
    hostname: str | None = None,
    *,
    rank: int = 0,
    sys_cpu: Path = SYS_CPU,
    cpuinfo: Path = PROC_CPUINFO,
    meminfo: Path = PROC_MEMINFO,
    dev: Path = DEV,
) -> NodeResources:
    """This node's resources as broker `rank` (override file first, else the machine).

    `hostname` defaults to the override's ``hostname`` key, then ``socket.gethostname()``.
    The sysfs/proc/dev paths are parameters so tests can point them at prepared trees.
    """
    if override:
        return _from_override(Path(override), rank, hostname)
    cpus = sorted(os.sched_getaffinity(0))
    packages = _cpu_sockets(cpus, sys_cpu, cpuinfo)
    if packages:
        # renumber physical package ids (which may be sparse) to socket 0..S-1
        order = {pkg: i for i, pkg in enumerate(sorted(set(packages.values())))}
        core_sockets = [order[packages[c]] for c in cpus]
        sockets = len(order)
    else:
        core_sockets, sockets = [], 1
    try:
        return NodeResources(
            rank=rank,
            hostname=hostname or _socket.gethostname(),
            cores=cpus,
            gpus=_gpus(dev),
            sockets=sockets,
            memory_mib=_memory_mib(meminfo),
            core_sockets=core_sockets,
        )
    except RError as exc:
        raise ResourceDiscoveryError(str(exc)) from None
