"""Keeps the webhook's certificates current: the Secret, the caBundle, the files served.

Every binder replica runs one `CertKeeper`; webhook.py calls `sync` at start, whenever the
Secret or the MutatingWebhookConfiguration changes (it watches both), when the set in use
is next due, and every ``--webhook-cert-check`` seconds, always with the time passed in:

1. **The Secret** (``fluxnode/fluxnode-webhook-cert``, type ``kubernetes.io/tls``): read it;
   if it is missing, issue a CA and certificate and create it. Replicas race at the first
   start: the API server accepts one create, the others get 409 and read the winner's
   (as the node agents do with the CURVE Secret). A set that is due (webhook_cert.py:
   two thirds of a lifetime, a missing name, a CA past its overlap) or unreadable is
   replaced by an update that carries the resourceVersion read; a 409 means another replica
   rotated first, and its set is read and used. A fresh CA made because the Secret was
   deleted or damaged keeps trusting the CAs this replica knew (the set it serves) and
   those the damaged Secret still shows: the other replicas serve certificates of those
   until they reload.
2. **The caBundle** of every webhook in the MutatingWebhookConfiguration
   (``fluxnode``) is set to the Secret's CA bundle when it differs, with a JSON patch
   guarded by a ``test`` of the resourceVersion read. This comes *before* step 3: the API
   server must trust a new CA before any replica serves a certificate it signed (the
   bundle still holds the old CA for the replicas not yet reloaded). A configuration that
   does not exist yet (installed later, or removed) is logged and tried again at the next
   sync: it does not stop the replica serving.
3. **The files**: the certificate and key the server loads are written to the
   certificate directory with mode 0600 (written to a new file, then renamed), and the
   server is told to use them; when the Secret did not change, nothing is rewritten.

`sync` raises `CertSyncError` (naming the object and the API's answer) when the Secret
cannot be read or written; the binder logs it, keeps serving what it has, and retries.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.api_client import status_message
from fluxnode.scheduler.binder.webhook_cert import (
    CertDataError,
    Lifetimes,
    WebhookCerts,
    salvage_cas,
    service_names,
)
from kubernetes.client import AdmissionregistrationV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.webhook")

Clock = Callable[[], datetime.datetime]
ROTATION_TRIES = 3  # a 409 on rotation means another replica wrote: read and decide again


class CertSyncError(RuntimeError):
    """The webhook's certificate Secret could not be read or written."""


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class CertTarget:
    """Where the certificates live and what they must name."""

    namespace: str  # of the Secret (fluxnode's own)
    secret: str
    webhook_config: str  # the MutatingWebhookConfiguration's name
    names: tuple[str, ...]  # DNS names (and IPs) the serving certificate must carry
    directory: Path  # where the served certificate and key are written (0600)
    lifetimes: Lifetimes = Lifetimes()


class CertKeeper:
    def __init__(self, core: CoreV1Api, admission: AdmissionregistrationV1Api,
                 target: CertTarget, use: Callable[[Path, Path], None] | None = None):
        self.core, self.admission, self.target = core, admission, target
        self.use = use  # the server's `use(cert_path, key_path)`
        self.current: WebhookCerts | None = None
        self.ca_bundle_patched = False  # the configuration's caBundle is the current bundle

    @property
    def cert_path(self) -> Path:
        return self.target.directory / "tls.crt"

    @property
    def key_path(self) -> Path:
        return self.target.directory / "tls.key"

    def sync(self, now: datetime.datetime) -> WebhookCerts:
        """One pass of steps 1-3 (see the module's docstring); returns the set in use."""
        certs = self._secret(now)
        self.ca_bundle_patched = self._patch_ca_bundle(certs)  # trusted first, then served
        if self.current is None or certs.to_data() != self.current.to_data():
            self._write(certs)
            if self.use is not None:
                self.use(self.cert_path, self.key_path)
            log.info("webhook serving certificate %x (expires %s)", certs.cert.serial_number,
                     certs.cert.not_valid_after_utc)
            self.current = certs
        return certs

    # -- the Secret -----------------------------------------------------------------

    def _secret(self, now: datetime.datetime) -> WebhookCerts:
        names, lifetimes = self.target.names, self.target.lifetimes
        known = self.current.trusted if self.current is not None else ()
        for _ in range(ROTATION_TRIES):
            secret = self._read()
            if secret is None:
                certs = WebhookCerts.issue(names, now, lifetimes, known)
                if self._create(certs):
                    log.info("created webhook certificate Secret %s", self._where)
                    return certs
                continue  # another replica created it first: read theirs
            data = secret.get("data") or {}
            try:
                certs = WebhookCerts.from_data(_decode(data))
                reason = certs.due(names, now, lifetimes)
            except CertDataError as exc:
                certs, reason = None, f"unreadable ({exc})"
            if reason is None:
                return certs
            if certs is not None:
                renewed = certs.renewed(names, now, lifetimes)
            else:
                previous = known + tuple(  # WebhookCerts.issue keeps the valid ones
                    c for c in salvage_cas(_decode(data, skip_bad=True), now) if c not in known)
                renewed = WebhookCerts.issue(names, now, lifetimes, previous)
            if self._replace(secret, renewed):
                log.info("rotated the webhook certificate in %s: %s", self._where, reason)
                return renewed
        raise CertSyncError(f"{self._where}: still changing after {ROTATION_TRIES} tries "
                            "(several writers?)")

    @property
    def _where(self) -> str:
        return f"Secret {self.target.namespace}/{self.target.secret}"

    def _read(self) -> dict | None:
        try:
            return kube_raw.call(self.core.read_namespaced_secret, self.target.secret,
                                 self.target.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise CertSyncError(f"cannot read {self._where}: {status_message(exc)}") from None

    def _body(self, certs: WebhookCerts, resource_version: str | None = None) -> dict:
        meta: dict = {"name": self.target.secret, "namespace": self.target.namespace,
                      "labels": {"app.kubernetes.io/name": "fluxnode",
                                 "app.kubernetes.io/component": "webhook"}}
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        data = {k: base64.b64encode(v).decode() for k, v in certs.to_data().items()}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": meta,
                "type": "kubernetes.io/tls", "data": data}

    def _create(self, certs: WebhookCerts) -> bool:
        """True if created, False if another replica's exists (409)."""
        try:
            kube_raw.call(self.core.create_namespaced_secret, self.target.namespace,
                          self._body(certs))
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise CertSyncError(f"cannot create {self._where}: {status_message(exc)}") from None

    def _replace(self, secret: dict, certs: WebhookCerts) -> bool:
        """True if replaced, False if it changed since read (409)."""
        version = (secret.get("metadata") or {}).get("resourceVersion")
        try:
            kube_raw.call(self.core.replace_namespaced_secret, self.target.secret,
                          self.target.namespace, self._body(certs, version))
            return True
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise CertSyncError(f"cannot update {self._where}: {status_message(exc)}") from None

    # -- the files ------------------------------------------------------------------

    def _write(self, certs: WebhookCerts) -> None:
        self.target.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path, content in ((self.cert_path, certs.cert_chain), (self.key_path, certs.key_pem)):
            partial = path.with_name(path.name + ".new")
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.chmod(partial, 0o600)  # an older file of another mode keeps it on O_TRUNC
            os.replace(partial, path)

    # -- the caBundle ---------------------------------------------------------------

    def _patch_ca_bundle(self, certs: WebhookCerts) -> bool:
        """True when every webhook of the configuration trusts the current bundle."""
        name = self.target.webhook_config
        try:
            config = kube_raw.call(self.admission.read_mutating_webhook_configuration, name)
        except ApiException as exc:
            log.warning("cannot read MutatingWebhookConfiguration %s (%s); its caBundle is set "
                        "at the next check", name, status_message(exc))
            return False
        bundle = base64.b64encode(certs.ca_bundle).decode()
        ops = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
               for i, hook in enumerate(config.get("webhooks") or [])
               if (hook.get("clientConfig") or {}).get("caBundle") != bundle]
        if not ops:
            return True
        version = (config.get("metadata") or {}).get("resourceVersion")
        guard = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}]
        try:
            kube_raw.call(self.admission.patch_mutating_webhook_configuration, name, guard + ops)
        except ApiException as exc:
            log.warning("cannot set the caBundle of MutatingWebhookConfiguration %s (%s); "
                        "tried again at the next check", name, status_message(exc))
            return False
        log.info("set the caBundle of MutatingWebhookConfiguration %s (%d webhooks)",
                 name, len(ops))
        return True


def _decode(data: dict, skip_bad: bool = False) -> dict[str, bytes]:
    """The Secret's data as bytes; a value that is not base64 is a CertDataError, or left
    out with `skip_bad` (to salvage the rest of a damaged Secret)."""
    out = {}
    for key, value in data.items():
        try:
            out[key] = base64.b64decode(value, validate=True)
        except (ValueError, TypeError):
            if not skip_bad:
                raise CertDataError(f"data[{key}] is not base64") from None
    return out


def target_names(service: str, namespace: str, extra: Sequence[str]) -> tuple[str, ...]:
    """The names the serving certificate carries: the Service's, then `extra`."""
    names = service_names(service, namespace)
    return tuple(names + [n for n in extra if n not in names])
