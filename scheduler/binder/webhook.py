"""The admission webhook as one part of a binder replica: its server and its certificates.

Every replica serves the webhook, leader or not (the Service spreads the API server's calls
over all Ready replicas), so this part runs beside leader election, not under it. A thread
calls the keeper's `sync` at start, then again as soon as either object it keeps changes:
it watches the certificate Secret and the MutatingWebhookConfiguration, each by name (as
cert-controller, Kueue's certificate manager, reconciles on both), so a replica reloads
the pair another replica wrote at once rather than serving a certificate of a CA the
bundle is leaving, and a caBundle someone wiped or changed is put back at once. Between
changes it wakes when the set in use is next due (two thirds of a lifetime, the end of a
CA's overlap) and every ``webhook_cert_check`` seconds at most, in case a watch missed
something. A failed sync (the API server away, a 403) is logged and tried again after a
short, growing delay while the server keeps serving the certificate it has. A watch the
replica's RBAC refuses (an older ClusterRole) is logged once, and the replica keeps to the
timed checks. `problem` is the replica's readiness as far as the webhook goes: not Ready
until a certificate is served. The binder hands its `Admission` the replica's group member
counts and PodGroup directory, so the webhook refuses a pod its declared group has no room
for (admission.py).
"""

from __future__ import annotations

import datetime
import logging
import tempfile
import threading
from pathlib import Path

from fluxnode.agent.kube.api_error import KubeAccessError
from fluxnode.agent.kube.backoff import Backoff
from fluxnode.agent.kube.informer import Informer
from fluxnode.scheduler.binder.admission import Admission
from fluxnode.scheduler.binder.config import BinderConfig
from fluxnode.scheduler.binder.webhook_cert import Lifetimes
from fluxnode.scheduler.binder.webhook_cert_keeper import (
    CertKeeper,
    CertSyncError,
    CertTarget,
    target_names,
    utc_now,
)
from fluxnode.scheduler.binder.webhook_server import WebhookServer
from kubernetes.client import AdmissionregistrationV1Api, CoreV1Api
from prometheus_client import CollectorRegistry

log = logging.getLogger("fluxnode.webhook")

MIN_WAKE = 0.05  # seconds: a set due now is synced at once, but never in a busy loop


class Webhook:
    def __init__(self, api_client, config: BinderConfig, registry: CollectorRegistry,
                 admission: Admission | None = None):
        assert config.webhook_port is not None
        namespace, _, secret = config.webhook_secret.partition("/")
        self._tmp = None if config.webhook_cert_dir else tempfile.TemporaryDirectory(
            prefix="fluxnode-webhook-")
        directory = Path(config.webhook_cert_dir or self._tmp.name)
        self.server = WebhookServer(config.webhook_host, config.webhook_port,
                                    admission or Admission(config.scheduler_name), registry)
        self.lifetimes = Lifetimes(datetime.timedelta(seconds=config.webhook_ca_lifetime),
                                   datetime.timedelta(seconds=config.webhook_cert_lifetime))
        core, admission_api = CoreV1Api(api_client), AdmissionregistrationV1Api(api_client)
        self.keeper = CertKeeper(
            core, admission_api,
            CertTarget(namespace, secret, config.webhook_config,
                       target_names(config.webhook_service, namespace, config.webhook_cert_names),
                       directory, self.lifetimes),
            self.server.use,
        )
        self.interval = config.webhook_cert_check
        self.last_error = ""
        self.syncs = 0  # passes of the keeper, failed or not
        self._stop = threading.Event()
        self._changed = threading.Event()  # a watched object changed: sync now
        self._thread = threading.Thread(target=self._run, name="webhook-certs", daemon=True)
        self.informers = [
            Informer("webhook-secret", core.list_namespaced_secret, self._on_change,
                     on_fatal=self._unwatched, watch_timeout=config.watch_timeout,
                     namespace=namespace, field_selector=f"metadata.name={secret}"),
            Informer("webhook-configuration", admission_api.list_mutating_webhook_configuration,
                     self._on_change, on_fatal=self._unwatched,
                     watch_timeout=config.watch_timeout,
                     field_selector=f"metadata.name={config.webhook_config}"),
        ]

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> Webhook:
        self.server.start()
        self._thread.start()
        for informer in self.informers:
            informer.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        for informer in self.informers:
            informer.stop()
        self._thread.join(10)
        self.server.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def problem(self) -> str | None:
        """Why this replica cannot serve the webhook, or None."""
        if not self.server.serving:
            detail = f": {self.last_error}" if self.last_error else ""
            return f"admission webhook has no certificate yet{detail}"
        return None

    def _on_change(self, kind: str, obj: object) -> None:
        self._changed.set()

    def _unwatched(self, exc: KubeAccessError) -> None:
        log.warning("webhook certificate: %s; checking every %g s instead of on change",
                    exc, self.interval)

    def _next_delay(self) -> float:
        """Seconds until the next timed check: the set in use falling due, or the interval."""
        current = self.keeper.current
        if current is None:
            return self.interval
        until = (current.next_due(self.lifetimes) - utc_now()).total_seconds()
        return max(MIN_WAKE, min(self.interval, until))

    def _run(self) -> None:
        backoff = Backoff(initial=0.5, maximum=30.0)
        while not self._stop.is_set():
            self._changed.clear()
            try:
                self.keeper.sync(utc_now())
                self.last_error = ""
                backoff.reset()
                delay = self._next_delay()
            except CertSyncError as exc:
                self.last_error = str(exc)
                log.warning("webhook certificate: %s; trying again", exc)
                delay = backoff.next_delay()
            except Exception as exc:  # the API server away, a bug: never a dead thread
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("webhook certificate check failed; trying again")
                delay = backoff.next_delay()
            self.syncs += 1
            self._changed.wait(delay)
