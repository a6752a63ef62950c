"""Our informer and leader election (agent/kube/) against the official client's
(``kubernetes.informer.SharedInformer``, ``kubernetes.leaderelection``) on the same
API emulator, through the real client and the emulator's kubeconfig.

Informers (both at once, on one stream of pod changes):

1. list ``--objects`` pods, then live: create as many again, update every pod, delete a
   quarter; CPU per event is the informer thread's own CPU clock
   (``time.pthread_getcpuclockid``), not wall time, so a loaded machine does not skew it;
2. a dropped watch while pods change: both resume from the last version seen;
3. bookmarks: writes to another resource move the resourceVersion on, the server sends
   a bookmark, then the history is compacted and every watch dropped: who resumes, who
   gets 410 and lists again;
4. a watch ended by an ERROR 410 event although the history is still there;
5. an outage: watches refused (403) for ``--outage`` seconds while pods change, the
   history is compacted, then allowed: both must list again; how many watch requests
   each made while refused, and what the owner is handed after the list.

After each phase the cache is compared with the emulator's own list (name ->
resourceVersion), and the live events with the writes the bench made.

Leader election (``--part election``): each candidate runs in its own process (the
official one reads the process-wide default client). First the holder's renewals are
refused (403): when it steps down, when the other leads. Then the new holder is frozen
with SIGSTOP (its clock and its renewals stop together): how long until the other
candidate leads, and after SIGCONT how long the old holder still believes it leads.

    .venv/bin/python bench/kube_informer.py --objects 500
    .venv/bin/python bench/kube_informer.py --part election --lease-duration 4
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.waiting import wait_for

NAMESPACE = "default"


def pod(name: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "busybox",
                                 "resources": {"requests": {"cpu": "100m"}}}]},
    }


def thread_cpu(thread: threading.Thread) -> float:
    """Seconds of CPU the thread has used (its own clock, whatever the machine's load)."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def name_rv(obj: object) -> tuple[str, str]:
    """(name, resourceVersion) of a JSON dict or of a client model object."""
    if isinstance(obj, dict):
        meta = obj["metadata"]
        return meta["name"], meta["resourceVersion"]
    meta = obj.metadata  # type: ignore[attr-defined]
    return meta.name, meta.resource_version


@dataclass
class Log:
    """What an owner was handed: (type, name, resourceVersion) per event, SYNCs apart."""

    events: list[tuple[str, str, str]] = field(default_factory=list)
    syncs: list[int] = field(default_factory=list)  # objects handed over per SYNC
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, obj: object) -> None:
        with self.lock:
            if kind == "SYNC":
                self.syncs.append(len(obj))  # type: ignore[arg-type]
            else:
                self.events.append((kind, *name_rv(obj)))

    def count(self) -> int:
        with self.lock:
            return len(self.events)

    def since(self, start: int) -> list[tuple[str, str, str]]:
        with self.lock:
            return self.events[start:]


class Side:
    """One informer under test: its thread, its cache as name -> resourceVersion."""

    informer: Any

    def __init__(self) -> None:
        self.log = Log()

    def start(self) -> None:
        self.informer.start()

    def stop(self) -> None:
        self.informer.stop()

    @property
    def thread(self) -> threading.Thread:
        return self.informer._thread


class Ours(Side):
    def __init__(self, api: client.CoreV1Api):
        from fluxnode.agent.kube.informer import Informer

        super().__init__()
        self.informer = Informer("pods", api.list_namespaced_pod, self.log.add,
                                 namespace=NAMESPACE)

    def cache(self) -> dict[str, str]:
        return dict(name_rv(o) for o in self.informer.snapshot().values())

    def synced(self) -> bool:
        return self.informer.synced.is_set()


class Theirs(Side):
    def __init__(self, api: client.CoreV1Api):
        from kubernetes.informer import ADDED, DELETED, MODIFIED, SharedInformer

        super().__init__()
        self.informer = SharedInformer(api.list_namespaced_pod, namespace=NAMESPACE)
        for kind in (ADDED, MODIFIED, DELETED):
            self.informer.add_event_handler(kind, lambda obj, kind=kind: self.log.add(kind, obj))

    def cache(self) -> dict[str, str]:
        return dict(name_rv(o) for o in self.informer.cache.list())

    def synced(self) -> bool:
        return self.informer._resource_version is not None


class Identity:
    """A client's own identity at the emulator: every request it makes is recorded here
    (the emulator's authorizer hook), and the verbs in ``refuse`` are answered 403."""

    def __init__(self, kube: KubeEmulator, user: str):
        self.requests: list[tuple[str, str]] = []  # (verb, resource)
        self.taken: list[tuple[str, str, float]] = []  # (verb, resource, monotonic) allowed
        self.refuse: set[str] = set()
        self.kubeconfig = kube.add_identity(user, self)

    def __call__(self, info) -> str | None:
        self.requests.append((info.verb, info.resource))
        if info.verb in self.refuse:
            return f"{info.verb} refused by the bench"
        self.taken.append((info.verb, info.resource, time.monotonic()))
        return None

    def count(self, verb: str) -> int:
        return sum(1 for v, r in list(self.requests) if v == verb and r == "pods")

    def resumed_since(self, mark: int) -> bool:
        """Its last request on pods since request number ``mark`` is a watch."""
        pods = [v for v, r in list(self.requests)[mark:] if r == "pods"]
        return bool(pods) and pods[-1] == "watch"


def server_state(kube: KubeEmulator) -> dict[str, str]:
    """The oracle: the emulator's own list, name -> resourceVersion."""
    return dict(name_rv(o) for o in kube.list("pods", NAMESPACE))


def check_events(got: list[tuple[str, str, str]], want: list[tuple[str, str, str]]) -> str:
    """'exactly once' or what differs (missing / extra events, by type)."""
    if got == want:
        return "exactly once, in order"
    missing = [e for e in want if e not in got]
    extra = [e for e in got if e not in want]
    dups = len(got) - len(set(got))
    kinds = lambda es: {k: sum(1 for e in es if e[0] == k) for k in sorted({e[0] for e in es})}  # noqa: E731
    return (f"{len(got)} events for {len(want)} changes: missing {kinds(missing)}, "
            f"extra {kinds(extra)}, duplicates {dups}")


def run_informers(objects: int, outage: float) -> dict:
    with KubeEmulator(namespaces=(NAMESPACE,)) as kube:
        ids = {"ours": Identity(kube, "ours"), "theirs": Identity(kube, "theirs")}
        api_clients = {k: kube.api_client(i.kubeconfig) for k, i in ids.items()}
        for i in range(objects):
            kube.create("pods", pod(f"pre-{i:05d}"), NAMESPACE)
        sides = {"ours": Ours(client.CoreV1Api(api_clients["ours"])),
                 "theirs": Theirs(client.CoreV1Api(api_clients["theirs"]))}

        report: dict = {"objects": objects}
        cpu0 = {}
        for side in sides.values():
            side.start()
        wait_for(lambda: all(s.synced() for s in sides.values()), 60, what="both listed")
        kube.wait_for_watches("pods", 2, timeout=30)
        for key, side in sides.items():
            cpu0[key] = thread_cpu(side.thread)
        report["list_cpu_ms"] = {k: round(cpu0[k] * 1000, 1) for k in sides}

        # -- 1. live stream ---------------------------------------------------------------
        start = {k: s.log.count() for k, s in sides.items()}
        want: list[tuple[str, str, str]] = []
        names = [f"live-{i:05d}" for i in range(objects)]
        for name in names:
            want.append(("ADDED", *name_rv(kube.create("pods", pod(name), NAMESPACE))))
        for name in [f"pre-{i:05d}" for i in range(objects)] + names:
            obj = kube.patch("pods", name, {"metadata": {"labels": {"step": "1"}}}, NAMESPACE)
            want.append(("MODIFIED", *name_rv(obj)))
        for name in names[: objects // 2]:
            obj = kube.delete("pods", name, NAMESPACE)
            want.append(("DELETED", *name_rv(obj)))
        wait_for(lambda: all(s.log.count() - start[k] >= len(want) for k, s in sides.items()),
                 120, what="every live event delivered to both")
        live: dict = {"events": len(want)}
        for key, side in sides.items():
            cpu = thread_cpu(side.thread) - cpu0[key]
            live[key] = {
                "cpu_us_per_event": round(cpu / len(want) * 1e6, 1),
                "delivery": check_events(side.log.since(start[key]), want),
                "cache_equals_server": side.cache() == server_state(kube),
            }
        report["live"] = live

        # -- 2. a dropped watch (history kept): resume from the last version seen ---------
        resume_want: list[tuple[str, str, str]] = []
        start = {k: s.log.count() for k, s in sides.items()}

        def drop_and_write() -> None:
            kube.store.close_all_watches()
            for i in range(objects // 10):
                obj = kube.patch("pods", f"pre-{i:05d}", {"metadata": {"labels": {"step": "d"}}},
                                 NAMESPACE)
                resume_want.append(("MODIFIED", *name_rv(obj)))

        report["dropped_watch"] = recover(kube, sides, ids, drop_and_write, lambda: None)
        for key, side in sides.items():
            report["dropped_watch"][key]["delivery"] = check_events(side.log.since(start[key]),
                                                                    resume_want)

        # -- 3. bookmark, then compaction and a dropped watch ------------------------------
        for i in range(20):
            kube.create("configmaps", {"metadata": {"name": f"cm-{i}"}, "data": {}}, NAMESPACE)
        kube.send_bookmarks("pods")
        wait_for(lambda: sides["ours"].informer.resource_version_number == kube.resource_version,
                 30, what="our informer took the bookmark")
        report["bookmark_then_compaction"] = recover(
            kube, sides, ids, lambda: (kube.compact(), kube.store.close_all_watches()),
            lambda: None)

        # -- 4. a watch ended by an ERROR 410 event while the history is still there -------
        report["error_410_history_kept"] = recover(
            kube, sides, ids, lambda: kube.expire_watches("pods"), lambda: None)

        # -- 5. outage: watches refused, changes, compaction, allowed ----------------------
        changed = objects // 10

        def outage_begins() -> None:
            for ident in ids.values():
                ident.refuse.add("watch")
            kube.store.close_all_watches()
            t0 = time.monotonic()
            for i in range(changed):
                kube.create("pods", pod(f"gap-{i:05d}"), NAMESPACE)
                kube.patch("pods", f"pre-{i:05d}", {"metadata": {"labels": {"step": "2"}}},
                           NAMESPACE)
                kube.delete("pods", f"live-{objects - 1 - i:05d}", NAMESPACE)
            kube.compact()
            time.sleep(max(0.0, outage - (time.monotonic() - t0)))  # the outage's length

        def outage_ends() -> None:
            for ident in ids.values():
                ident.refuse.discard("watch")

        gap = recover(kube, sides, ids, outage_begins, outage_ends)
        report["outage_then_compaction"] = {"outage_s": outage, "changes": changed * 3, **gap}
        for side in sides.values():
            side.stop()
        for api_client in api_clients.values():
            api_client.close()
        return report


def recover(kube: KubeEmulator, sides: dict, ids: dict, begin, end) -> dict:
    """Run ``begin()`` (a disruption), ``end()``, wait until both informers watch again with
    the server's state, and say what each did: requests, lists, CPU, what it handed over."""
    start = {k: s.log.count() for k, s in sides.items()}
    syncs0 = len(sides["ours"].log.syncs)
    marks = {k: len(i.requests) for k, i in ids.items()}
    cpu0 = {k: thread_cpu(s.thread) for k, s in sides.items()}
    watches0 = {k: i.count("watch") for k, i in ids.items()}
    begin()
    during = {k: i.count("watch") - watches0[k] for k, i in ids.items()}
    end()

    def settled() -> bool:
        return (all(ids[k].resumed_since(m) for k, m in marks.items())
                and kube.watch_count("pods") == 2
                and all(s.cache() == server_state(kube) for s in sides.values()))

    wait_for(settled, 60, what="both informers watching again with the server's state")
    out: dict = {"objects_on_server": len(server_state(kube))}
    for key, side in sides.items():
        events = side.log.since(start[key])
        pods = [v for v, r in ids[key].requests[marks[key]:] if r == "pods"]
        out[key] = {
            "requests": {"watch": pods.count("watch"), "list": pods.count("list")},
            "watch_requests_during": during[key],
            "cpu_ms": round((thread_cpu(side.thread) - cpu0[key]) * 1000, 1),
            "events_handed_over": {t: sum(1 for e in events if e[0] == t)
                                   for t in ("ADDED", "MODIFIED", "DELETED")},
        }
    out["ours"]["sync_objects"] = sides["ours"].log.syncs[syncs0:]
    return out


# -- leader election ------------------------------------------------------------------------

def elector_child(kind: str, kubeconfig: str, identity: str, lease: float, renew: float,
                  retry: float) -> None:
    """One candidate in its own process: prints 'LEADING <monotonic>' / 'STOPPED <monotonic>'."""
    from kubernetes import config

    def say(what: str) -> None:
        print(f"{what} {time.monotonic():.6f}", flush=True)

    if kind == "ours":
        from fluxnode.agent.kube.leader_election import LeaderElector

        api_client = config.new_client_from_config(config_file=kubeconfig)
        elector = LeaderElector(
            client.CoordinationV1Api(api_client), NAMESPACE, "bench-lease", identity,
            lease_duration=lease, renew_deadline=renew, retry_period=retry,
            on_started=lambda: say("LEADING"), on_stopped=lambda: say("STOPPED"))
        elector.start()
        signal.sigwait([signal.SIGTERM])
        return
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    # LeaseLock builds CoordinationV1Api() on the process-wide default configuration:
    # loading the kubeconfig is the only way to point it somewhere
    config.load_kube_config(config_file=kubeconfig)
    lock = LeaseLock("bench-lease", NAMESPACE, identity)
    cfg = electionconfig.Config(lock, lease_duration=lease, renew_deadline=renew,
                                retry_period=retry, onstarted_leading=lambda: say("LEADING"),
                                onstopped_leading=lambda: say("STOPPED"))
    while True:  # run() returns after losing the lease; stand again, as a restarted pod would
        leaderelection.LeaderElection(cfg).run()


class Candidate:
    def __init__(self, kind: str, kubeconfig: Path, identity: str, args: argparse.Namespace):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--elector-child", kind, "--kubeconfig", str(kubeconfig),
             "--identity", identity, "--lease-duration", str(args.lease_duration),
             "--renew-deadline", str(args.renew_deadline), "--retry-period",
             str(args.retry_period)],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[tuple[str, float]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            what, at = line.split()
            self.lines.append((what, float(at)))

    def first(self, what: str, after: float = 0.0) -> float | None:
        return next((t for w, t in list(self.lines) if w == what and t >= after), None)

    def wait(self, what: str, after: float, why: str) -> float:
        """When it printed ``what`` (LEADING, STOPPED) after ``after``, waiting for it."""
        wait_for(lambda: self.first(what, after) is not None, 60, what=why)
        at = self.first(what, after)
        assert at is not None
        return at

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_election(kind: str, args: argparse.Namespace) -> dict:
    """a leads, b stands by. 1: a's renewals refused (403): when a steps down, when b leads.
    2: b, now leading, frozen (SIGSTOP): when a leads; b resumed (SIGCONT): when b steps down."""
    lease = ("leases.coordination.k8s.io", "bench-lease", NAMESPACE)
    with KubeEmulator(namespaces=(NAMESPACE,)) as kube:
        ids = {n: Identity(kube, n) for n in ("a", "b")}
        a = Candidate(kind, ids["a"].kubeconfig, "a", args)
        b: Candidate | None = None
        try:
            a.wait("LEADING", 0.0, f"{kind}: a leads")
            b = Candidate(kind, ids["b"].kubeconfig, "b", args)
            wait_for(lambda: ids["b"].requests.count(("get", lease[0])) >= 3, 60,
                     what=f"{kind}: b reads the lease")
            ids["a"].refuse.update(("update", "create"))
            refused = time.monotonic()
            renewed = max(t for v, r, t in list(ids["a"].taken) if v == "update")
            b_took = b.wait("LEADING", refused, f"{kind}: b takes over")
            a_stopped = a.wait("STOPPED", refused, f"{kind}: a steps down")
            ids["a"].refuse.clear()
            wait_for(lambda: ids["a"].requests[-1:] == [("get", lease[0])], 60,
                     what=f"{kind}: a stands again")
            paused = time.monotonic()
            b.proc.send_signal(signal.SIGSTOP)
            a_took = a.wait("LEADING", paused, f"{kind}: a takes over from the frozen b")
            time.sleep(args.pause_after)  # b's process stays frozen a while longer
            resumed = time.monotonic()
            b.proc.send_signal(signal.SIGCONT)
            b_stopped = b.wait("STOPPED", resumed, f"{kind}: b steps down after the pause")
            return {
                "renewals_refused": {  # since the last renewal the server took
                    "holder_steps_down_after_s": round(a_stopped - renewed, 2),
                    "other_leads_after_s": round(b_took - renewed, 2),
                },
                "holder_frozen": {
                    "other_leads_after_s": round(a_took - paused, 2),
                    "old_holder_believes_after_resume_s": round(b_stopped - resumed, 2),
                },
                "holder_at_end": kube.get(*lease)["spec"].get("holderIdentity"),
            }
        finally:
            a.stop()
            if b is not None:
                b.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("informer", "election", "both"), default="both")
    parser.add_argument("--objects", type=int, default=500,
                        help="pods listed at start; as many are created live (default 500)")
    parser.add_argument("--outage", type=float, default=1.0,
                        help="seconds watches are refused in phase 3 (default 1.0)")
    parser.add_argument("--lease-duration", type=int, default=4,
                        help="seconds (whole: the official lock writes int(str(value)))")
    parser.add_argument("--renew-deadline", type=int, default=3)
    parser.add_argument("--retry-period", type=int, default=1,
                        help="the official Config refuses less than 1 s")
    parser.add_argument("--pause-after", type=float, default=1.0,
                        help="seconds the frozen holder stays frozen after the takeover")
    parser.add_argument("--elector-child", choices=("ours", "theirs"), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--identity", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.elector_child:
        elector_child(args.elector_child, args.kubeconfig, args.identity, args.lease_duration,
                      args.renew_deadline, args.retry_period)
        return
    report: dict = {}
    if args.part in ("informer", "both"):
        report["informer"] = run_informers(args.objects, args.outage)
    if args.part in ("election", "both"):
        report["election"] = {
            "lease_duration": args.lease_duration, "renew_deadline": args.renew_deadline,
            "retry_period": args.retry_period,
            **{k: run_election(k, args) for k in ("ours", "theirs")},
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
