"""Kubernetes API emulator throughput through the official client: creates, lists,
patches, and watch delivery latency (what the installer and binder tests lean on), and the
CPU the emulator's server thread spends per pod create and per status patch (user +
system from /proc, the figure that does not move with the machine's load as rates do).

    .venv/bin/python bench/kube_emulator.py [N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

from binder import cpu_of  # (bench/binder.py)
from fluxnode.agent.kube import raw as kube_raw
from kubernetes import client, watch

from fluxnode.testing.kube_emulator import KubeEmulator


def pod(i: int) -> dict:
    return {"metadata": {"name": f"p{i:05d}", "labels": {"app": "bench"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def main(n: int) -> None:
    with KubeEmulator() as kube:
        api = client.CoreV1Api(kube.api_client())
        assert kube._thread is not None and kube._thread.native_id is not None
        server = (os.getpid(), kube._thread.native_id)
        cpu0 = cpu_of(*server)
        t0 = time.perf_counter()
        for i in range(n):
            # read and released (kube_raw.call), as the product's writes are: a response left
            # unread keeps its connection, and the next call pays a new TLS handshake
            kube_raw.call(api.create_namespaced_pod, "default", pod(i))
        t_create = time.perf_counter() - t0
        cpu_create = cpu_of(*server) - cpu0
        t0 = time.perf_counter()
        raw = api.list_namespaced_pod("default", _preload_content=False)
        t_list_raw = time.perf_counter() - t0
        t0 = time.perf_counter()
        api.list_namespaced_pod("default")
        t_list_model = time.perf_counter() - t0
        rv = int(kube.resource_version)
        latencies: list[float] = []
        sent: dict[str, float] = {}
        done = threading.Event()
        w = watch.Watch()

        def consume() -> None:
            for e in w.stream(
                api.list_namespaced_pod, "default", resource_version=str(rv), deserialize=False
            ):
                name = e["object"]["metadata"]["name"]
                latencies.append(time.perf_counter() - sent[name])
                if len(latencies) >= min(n, 200):
                    done.set()
                    w.stop()
                    return

        threading.Thread(target=consume, daemon=True).start()
        kube.wait_for_watches("pods")
        cpu0 = cpu_of(*server)
        t0 = time.perf_counter()
        for i in range(min(n, 200)):
            name = f"p{i:05d}"
            sent[name] = time.perf_counter()
            kube_raw.call(api.patch_namespaced_pod_status,
                          name, "default", {"status": {"phase": "Running"}})
        done.wait(60)
        t_patch = time.perf_counter() - t0
        cpu_patch = cpu_of(*server) - cpu0
        print(
            f"pods={n}: create {n / t_create:.0f}/s, list raw {t_list_raw * 1e3:.0f} ms "
            f"({len(raw.data) / 1024:.0f} KiB), list as models {t_list_model * 1e3:.0f} ms, "
            f"patch+watch {len(latencies) / t_patch:.0f}/s, watch latency median "
            f"{statistics.median(latencies) * 1e3:.1f} ms, p95 "
            f"{sorted(latencies)[int(len(latencies) * 0.95)] * 1e3:.1f} ms; server thread CPU "
            f"per create {cpu_create / n * 1e6:.0f} us, per patch with its watch event "
            f"{cpu_patch / min(n, 200) * 1e6:.0f} us"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("n", nargs="?", type=int, default=1000, metavar="N",
                        help="pods to create, list and patch (default: 1000)")
    main(parser.parse_args().n)
