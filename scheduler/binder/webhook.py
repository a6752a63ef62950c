"""The admission webhook as one part of a binder replica: its server and its certificates.

Every replica serves the webhook, leader or not (the Service spreads the API server's calls
over all Ready replicas), so this part runs beside leader election, not under it. A thread
calls the keeper's `sync` at start and every ``webhook_cert_check`` seconds after; a
failed sync (the API server away, a 403) is logged and tried again after a short, growing
delay while the server keeps serving the certificate it has. `problem` is the replica's
readiness as far as the webhook goes: not Ready until a certificate is served. The binder
hands its `Admission` the replica's group member counts and PodGroup directory, so the
webhook refuses a pod its declared group has no room for (admission.py).
"""

from __future__ import annotations

import logging
import tempfile
import threading
from pathlib import Path

from fluxnode.agent.kube.backoff import Backoff
from fluxnode.scheduler.binder.admission import Admission
from fluxnode.scheduler.binder.config import BinderConfig
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
        self.keeper = CertKeeper(
            CoreV1Api(api_client), AdmissionregistrationV1Api(api_client),
            CertTarget(namespace, secret, config.webhook_config,
                       target_names(config.webhook_service, namespace, config.webhook_cert_names),
                       directory),
            self.server.use,
        )
        self.interval = config.webhook_cert_check
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook-certs", daemon=True)

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> Webhook:
        self.server.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
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

    def _run(self) -> None:
        backoff = Backoff(initial=0.5, maximum=30.0)
        while not self._stop.is_set():
            try:
                self.keeper.sync(utc_now())
                self.last_error = ""
                backoff.reset()
                delay = self.interval
            except CertSyncError as exc:
                self.last_error = str(exc)
                log.warning("webhook certificate: %s; trying again", exc)
                delay = backoff.next_delay()
            except Exception as exc:  # the API server away, a bug: never a dead thread
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("webhook certificate check failed; trying again")
                delay = backoff.next_delay()
            self._stop.wait(delay)
