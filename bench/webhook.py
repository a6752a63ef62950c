"""The admission webhook's cost per request (issue 30: webhook p99 < 20 ms).

A `WebhookServer` with a fresh certificate runs in a child process (as in a binder
replica, alone in its process); this process posts AdmissionReviews to it over HTTPS with
urllib3, each client on one keep-alive connection as the API server keeps them, and
verifies the certificate for the Service's name. The requests cycle through an opted-in
Indexed Job of 8 pods, a plain opted-in pod and a pod of a Kueue group (a gate each).

Reported: the latency percentiles seen by the clients (wall time: they move with the
machine's load) and the server's CPU per request (its process's user + system time from
/proc, before and after the run; the figure to compare between changes).

    .venv/bin/python bench/webhook.py --requests 3000 --clients 4

With --probe PORT --ca CA --rate R it probes a webhook already running (a binder's) at R
requests a second until its stdin closes: bench/workloads.py's probe through its burst.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import urllib3
from fluxnode.scheduler.binder.admission import Admission
from fluxnode.scheduler.binder.webhook_cert import WebhookCerts, service_names
from fluxnode.scheduler.binder.webhook_server import PATH, WebhookServer

SERVICE = "fluxnode-webhook.fluxnode.svc"



def allowed(data: bytes) -> bool:
    """Whether an answer is an AdmissionReview that allows the object (read as JSON: its
    spacing is the encoder's)."""
    try:
        return json.loads(data)["response"]["allowed"] is True
    except (ValueError, KeyError, TypeError):
        return False

def objects() -> list[tuple[str, str, dict]]:
    container = {"name": "c", "image": "busybox",
                 "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ml", "labels": {"fluxnode.io/queue": "q"}},
           "spec": {"parallelism": 8, "completions": 8, "completionMode": "Indexed",
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ml", "labels": {"fluxnode.io/queue": "q"}},
           "spec": {"containers": [container], "schedulerName": "default-scheduler"}}
    member = json.loads(json.dumps(pod))
    member["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "g"
    member["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "4"}
    return [("batch", "jobs", job), ("", "pods", pod), ("", "pods", member)]


def review(i: int, group: str, resource: str, obj: dict) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": f"req-{i}", "operation": "CREATE",
                                   "resource": {"group": group, "version": "v1",
                                                "resource": resource},
                                   "namespace": "ml", "object": obj}}).encode()


def serve(directory: Path) -> None:
    """The child: serve until stdin closes; print the port first."""
    server = WebhookServer("127.0.0.1", 0, Admission())
    server.use(directory / "tls.crt", directory / "tls.key")
    server.start()
    print(server.port, flush=True)
    sys.stdin.read()
    server.stop()


def probe(port: int, ca: Path, rate: float) -> None:
    """--probe: post the Job's AdmissionReview to a webhook already serving on `port` (a
    binder's, whose CA is `ca`), `rate` times a second on one kept-alive connection, until
    stdin closes; then print the latencies (seconds) as one JSON list. bench/workloads.py
    runs it through its burst: the webhook's latency as a client with an interpreter of its
    own sees it (the emulator's calls wait for its own busy interpreter too)."""
    pool = urllib3.HTTPSConnectionPool(
        "127.0.0.1", port, maxsize=1, ca_certs=str(ca), server_hostname=SERVICE,
        assert_hostname=SERVICE, retries=False, timeout=10)
    body = review(0, *objects()[0])
    headers = {"Content-Type": "application/json"}
    pool.request("POST", PATH, body=body, headers=headers)  # the TLS handshake, not counted
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    latencies: list[float] = []
    due = time.perf_counter()
    while not stop.is_set():
        start = time.perf_counter()
        r = pool.request("POST", PATH, body=body, headers=headers)
        latencies.append(time.perf_counter() - start)
        if r.status != 200 or not allowed(r.data):
            raise SystemExit(f"webhook answered {r.status}: {r.data[:200]!r}")
        due += 1 / rate
        stop.wait(max(0.0, due - time.perf_counter()))  # the probe's pace (a bench)
    print(json.dumps(latencies), flush=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests in all")
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--probe", type=int, metavar="PORT",
                        help="probe a webhook serving on PORT (with --ca, --rate) until stdin "
                        "closes, then print the latencies (bench/workloads.py)")
    parser.add_argument("--ca", type=Path, help="the probed webhook's CA certificate (PEM)")
    parser.add_argument("--rate", type=float, default=20.0, help="probe requests per second")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.probe is not None:
        if args.ca is None or args.rate <= 0:
            parser.error("--probe needs --ca and a --rate above 0")
        probe(args.probe, args.ca, args.rate)
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        certs = WebhookCerts.issue(service_names("fluxnode-webhook", "fluxnode"),
                                   datetime.datetime.now(datetime.UTC))
        for name, data in (("tls.crt", certs.cert_chain), ("tls.key", certs.key_pem),
                           ("ca.crt", certs.ca_bundle)):
            (directory / name).write_bytes(data)
        child = subprocess.Popen([sys.executable, __file__, "--serve", str(directory)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        port = int(child.stdout.readline())
        kinds = objects()
        bodies = [review(i, *kinds[i % len(kinds)]) for i in range(args.requests)]
        latencies: list[float] = []
        lock = threading.Lock()

        def client(share: list[bytes]) -> None:
            pool = urllib3.HTTPSConnectionPool(
                "127.0.0.1", port, maxsize=1, ca_certs=str(directory / "ca.crt"),
                server_hostname=SERVICE, assert_hostname=SERVICE, retries=False, timeout=10)
            pool.request("POST", PATH, body=share[0])  # the TLS handshake, not counted
            mine = []
            for body in share:
                start = time.perf_counter()
                r = pool.request("POST", PATH, body=body,
                                 headers={"Content-Type": "application/json"})
                mine.append(time.perf_counter() - start)
                assert r.status == 200 and allowed(r.data), r.data[:200]
            pool.close()
            with lock:
                latencies.extend(mine)

        before = cpu_seconds(child.pid)
        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(bodies[i::args.clients],))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        cpu = cpu_seconds(child.pid) - before
        child.stdin.close()
        child.wait(10)
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    print(f"{len(latencies)} requests, {args.clients} clients, {wall:.2f} s "
          f"({len(latencies) / wall:.0f}/s), load {os.getloadavg()[0]:.1f}")
    print(f"latency ms: p50 {q[49] * 1e3:.2f}  p90 {q[89] * 1e3:.2f}  p99 {q[98] * 1e3:.2f}  "
          f"max {latencies[-1] * 1e3:.2f}")
    print(f"server CPU per request: {cpu / len(latencies) * 1e3:.3f} ms "
          f"(includes the first requests' handshakes)")


if __name__ == "__main__":
    main()
