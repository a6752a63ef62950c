"""What one agent reconcile costs as the cluster grows: rank planning, broker.toml and R
rendering for N nodes, and the emulator-backed informer list of N nodes.

    .venv/bin/python bench/agent_reconcile.py [N ...]
"""

from __future__ import annotations

import argparse
import time

from fluxnode.agent.node import overlay_config
from fluxnode.agent.node import resources as node_resources
from fluxnode.agent.node.ranks import RankMap, plan
from fluxnode.agent.node.selection import NodeSelection


def node(i: int) -> dict:
    name = f"node{i:05d}"
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
            "labels": {"kubernetes.io/hostname": name},
        },
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "capacity": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "4"},
            "addresses": [
                {"type": "InternalIP", "address": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"}
            ],
        },
    }


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def measure(n: int, settings: overlay_config.OverlaySettings) -> str:
    nodes = {node(i)["metadata"]["name"]: node(i) for i in range(n)}
    sel = NodeSelection()
    t_plan, rank_map = timed(lambda: plan(RankMap(), set(sel.members(nodes)), sel.joinable(nodes)))
    extra = node(n)
    grown = {**nodes, extra["metadata"]["name"]: extra}
    t_join, _ = timed(lambda: plan(rank_map, set(grown), [extra["metadata"]["name"]]))
    t_toml, text = timed(lambda: overlay_config.render(rank_map, nodes, settings))
    t_R, _ = timed(lambda: node_resources.cluster_R(rank_map, nodes))
    t_place, _ = timed(lambda: overlay_config.placement(rank_map, nodes, settings, "node00000"))
    return (
        f"{n:>6} {t_plan * 1e3:>10.1f}ms {t_join * 1e3:>11.1f}ms {t_toml * 1e3:>10.1f}ms "
        f"{t_R * 1e3:>7.1f}ms "
        f"{t_place * 1e3:>8.2f}ms   (broker.toml {len(text) / 1024:.0f} KiB)"
    )


def main(sizes: list[int]) -> None:
    settings = overlay_config.OverlaySettings(port=8050, bind_address="0.0.0.0", topo="kary:2",
                                              cert_path="/etc/fluxnode/curve.cert")
    print(
        f"{'nodes':>6} {'select+plan':>12} {'plan(1 join)':>13} {'broker.toml':>12} {'R':>9} "
        f"{'placement':>10}"
    )
    for n in sizes:
        print(measure(n, settings))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sizes", nargs="*", type=int, default=[10, 100, 1000], metavar="N",
                        help="node counts (default: 10 100 1000)")
    main(parser.parse_args().sizes)
