"""Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does.

Two binder replicas must never bind at once. The holder renews the Lease every
`retry_period`; a candidate takes over only after it has seen the same lease
record unchanged for a whole `lease_duration` by its own clock (no trust in
clock agreement), and every write carries the resourceVersion it read, so two
candidates racing cannot both win. A leader that could not renew for
`renew_deadline` (< lease_duration) steps down before anyone may take over, even
while a renewal still hangs: the lease calls run on a thread of their own and the
leader waits for one only until its deadline (urllib3 retries a timed-out read up to
three times, so a request timeout alone would not bound it).

Both deadlines are read on ``clock`` (monotonic seconds, ``time.monotonic`` unless a test
passes its own): a frozen process or a paused clock shows how the rules behave when
time jumps, which the client's own ``kubernetes.leaderelection`` (wall clock, no
injection) cannot show (see docs/dependencies.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.timestamps import micro_time_now
from kubernetes.client import CoordinationV1Api
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.binder.leader")


class LeaderElector:
    def __init__(
        self,
        api: CoordinationV1Api,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started = on_started
        self.on_stopped = on_stopped
        self._clock = clock
        self.is_leader = threading.Event()
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._pending: _Try | None = None  # a try not answered yet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    def start(self) -> LeaderElector:
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        self._thread.join(5)
        if release and self.is_leader.is_set():
            self._step_down()
            try:
                self._release()
            except Exception as exc:
                log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = self._clock()
            if self.is_leader.is_set() and now - self._last_renew >= self.renew_deadline:
                self._step_down()
            won, started = self._try(now)
            if won and self._clock() - started < self.renew_deadline:
                self._last_renew = started  # the record was written after this instant
                if not self.is_leader.is_set():
                    log.info(
                        "became leader (lease %s/%s, identity %s)",
                        self.namespace,
                        self.name,
                        self.identity,
                    )
                    self.is_leader.set()
                    self.on_started()
            wait = self.retry_period
            if self.is_leader.is_set():  # wake at the deadline, not up to a retry period later
                deadline = self._last_renew + self.renew_deadline
                wait = min(wait, max(0.0, deadline - self._clock()))
            self._stop.wait(wait)

    def _try(self, now: float) -> tuple[bool, float]:
        """One try to acquire or renew (or the one still under way), waited for until the
        leader's deadline at most; returns (won, when the try began)."""
        if self._pending is None:
            self._pending = _Try(self._try_acquire_or_renew, now)
        attempt = self._pending
        limit = self.renew_deadline
        if self.is_leader.is_set():
            limit = max(0.0, self._last_renew + self.renew_deadline - now)
        if not attempt.done.wait(limit):
            return False, attempt.began  # still hanging: the next round waits for it again
        self._pending = None
        if attempt.error is not None:
            log.warning("lease %s/%s: %s", self.namespace, self.name, attempt.error)
        return attempt.won, attempt.began

    def _step_down(self) -> None:
        if self.is_leader.is_set():
            log.warning("lost leadership (lease %s/%s)", self.namespace, self.name)
            self.is_leader.clear()
            self.on_stopped()

    def _read(self) -> dict | None:
        try:
            return kube_raw.call(self.api.read_namespaced_lease, self.name, self.namespace,
                                 _request_timeout=self.renew_deadline)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _spec(self, transitions: int, acquire: str) -> dict:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquire,
            "renewTime": micro_time_now(),
            "leaseTransitions": transitions,
        }

    def _try_acquire_or_renew(self) -> bool:
        lease = self._read()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(0, micro_time_now()),
            }
            try:
                kube_raw.call(self.api.create_namespaced_lease, self.namespace, body,
                              _request_timeout=self.renew_deadline)
            except ApiException as exc:
                if exc.status == 409:
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, str(spec.get("renewTime")))
        now = self._clock()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if now - self._observed_at < duration:
                return False  # someone else holds it and renewed within the duration
        if holder == self.identity:
            new_spec = self._spec(
                int(spec.get("leaseTransitions") or 0), spec.get("acquireTime") or micro_time_now()
            )
        else:
            new_spec = self._spec(int(spec.get("leaseTransitions") or 0) + 1, micro_time_now())
        lease["spec"] = new_spec
        try:
            kube_raw.call(self.api.replace_namespaced_lease, self.name, self.namespace, lease,
                          _request_timeout=self.renew_deadline)
        except ApiException as exc:
            if exc.status == 409:  # someone wrote in between: re-read next round
                return False
            raise
        self._observed = (self.identity, new_spec["renewTime"])
        return True

    def _release(self) -> None:
        lease = self._read()
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        lease["spec"]["holderIdentity"] = ""
        lease["spec"]["renewTime"] = micro_time_now()
        kube_raw.call(self.api.replace_namespaced_lease, self.name, self.namespace, lease,
                      _request_timeout=self.renew_deadline)


class _Try:
    """One acquire-or-renew on a daemon thread of its own: the elector waits for it only
    until its deadline, and a call that hangs must not hold up the process's exit either."""

    def __init__(self, call: Callable[[], bool], began: float):
        self.began = began
        self.won = False
        self.error: Exception | None = None
        self.done = threading.Event()
        threading.Thread(target=self._run, args=(call,), name="leader-election-call",
                         daemon=True).start()

    def _run(self, call: Callable[[], bool]) -> None:
        try:
            self.won = call()
        except Exception as exc:
            self.error = exc
        finally:
            self.done.set()
