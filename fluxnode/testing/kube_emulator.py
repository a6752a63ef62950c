"""A Kubernetes API server emulator on 127.0.0.1 for tests that use the real client.

Why not kmock's ``KubernetesEmulator``: it keeps no resourceVersion (lists say
``'...'``), replays every object on each watch regardless of the requested
resourceVersion, has no label/field selectors, no subresources (binding, status),
no history to return 410 Gone from, and merges patches naively. Informers and the
binder depend on all of those, so this module serves the API directly on aiohttp
(kmock's own transport) with a store (fluxnode.testing.kube_store) that behaves like etcd plus
the registry strategies.

Usage::

    with KubeEmulator() as kube:                # or start()/stop()
        kube.add_node("worker-1")
        api = kubernetes.client.CoreV1Api(kube.api_client())
        # subprocesses: KUBECONFIG=kube.kubeconfig_path

Hooks for tests: ``forbid(verb, resource, ...)`` (403), ``expire_watches()`` (ERROR
410 on open watches), ``compact()`` (resuming older resourceVersions gets 410),
``send_bookmarks()``, ``wait_for_watches(resource, n)``, ``hold_terminations`` /
``finish_terminations()`` (graceful pod deletion: the kubelet's part), ``authorizer`` (e.g. RBAC
rules from manifests, see fluxnode.testing.kube_rbac), ``requests`` (what was asked), and direct
state access: ``get/list/create/update/patch/delete``, ``add_node``,
``set_node_ready``, ``set_pod_phase``. Direct writes skip authorization and the
client-side strategies (so they can set ``status``), and notify watches like any write.

What extends a real API server is emulated too: CustomResourceDefinitions (kube_crd,
kube_crd_schema: a created CRD's resource is served), mutating admission webhooks
(kube_admission: called over HTTPS from the server's loop on every API create and update;
``service_endpoints`` routes their Services to loopback), and, when asked for
(``job_controller=True``), the Job controller (kube_job_controller). Direct writes skip
admission, as they skip authorization.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop
import yaml
from aiohttp import web

from fluxnode.testing import kube_json
from fluxnode.testing.kube_admission import (
    MUTATING_REF,
    VALIDATING_REF,
    AdmissionNotEmulated,
    Attributes,
    admit,
    matches,
    rule_matches,
)
from fluxnode.testing.kube_corked import CorkedServer
from fluxnode.testing.kube_crd import CrdNotEmulated
from fluxnode.testing.kube_crd_schema import prune
from fluxnode.testing.kube_events import as_core_event, as_events_event
from fluxnode.testing.kube_eviction import BudgetNotEmulated, budget_status, evict
from fluxnode.testing.kube_field_validation import (
    NoSchema,
    drop_fields,
    field_name,
    unknown_field_paths,
)
from fluxnode.testing.kube_job_controller import DEFAULT_BACKOFF as DEFAULT_JOB_BACKOFF
from fluxnode.testing.kube_job_controller import MAX_BACKOFF as MAX_JOB_BACKOFF
from fluxnode.testing.kube_job_controller import USER as JOB_CONTROLLER_USER
from fluxnode.testing.kube_job_controller import JobController
from fluxnode.testing.kube_list_options import end_of_initial_events, initial_events
from fluxnode.testing.kube_local_client import LocalClient
from fluxnode.testing.kube_priority import REF as PRIORITY_REF
from fluxnode.testing.kube_priority import admit_pod as admit_pod_priority
from fluxnode.testing.kube_selectors import SelectorError, selector_predicate
from fluxnode.testing.kube_store import (
    DEFAULT_NAMESPACES,
    RETURNS_DELETED_OBJECT,
    ApiError,
    Change,
    KubeStore,
    ResourceType,
    bad_request,
    json_copy,
    now_rfc3339,
)
from fluxnode.testing.kube_tables import PrintingNotEmulated, custom_table, table, wants_table
from fluxnode.testing.kube_tls import ServingCerts, make_serving_certs
from fluxnode.testing.kube_webhook_client import WebhookClients

SERVER_VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.0-fluxnode-emulator",
                  "platform": "linux/amd64", "goVersion": "go1.24"}


# Paths a real API server serves that this emulator does not: a client that asks for them
# gets 501 naming the path (never a 404 a client could take for "not there, go on").
NOT_EMULATED_PATHS = ("/openapi/v2", "/healthz", "/livez", "/readyz", "/metrics", "/logs",
                      "/.well-known", "/openid", "/apis/apiregistration.k8s.io",
                      "/apis/authorization.k8s.io",
                      "/apis/authentication.k8s.io")


def _warned(warnings: list[str], response: web.Response) -> web.Response:
    """A response with the API server's ``Warning: 299 - "..."`` headers (kubectl prints them)."""
    for warning in warnings:
        response.headers.add("Warning", f'299 - "{warning}"')
    return response


def not_emulated(request: web.BaseRequest, what: str) -> ApiError:
    """501 for a request a real API server answers but this emulator does not: a client
    (kubectl) must fail loudly there, never get a guess that looks like success."""
    return ApiError(
        501,
        "NotImplemented",
        f"the Kubernetes API emulator does not emulate {what}: {request.method} "
        f"{request.path_qs}",
    )


@dataclass(frozen=True)
class RequestInfo:
    """What a request asks for, in RBAC terms (verb, resource[/subresource], namespace, name)."""

    verb: str  # get list watch create update patch delete deletecollection
    resource: str  # ref, e.g. "pods", "leases.coordination.k8s.io"
    subresource: str | None
    namespace: str | None
    name: str | None
    group: str
    query: dict[str, str]

    @property
    def resource_path(self) -> str:
        """``pods/binding`` style name (without group) as RBAC rules spell it."""
        plural = self.resource.split(".", 1)[0]
        return f"{plural}/{self.subresource}" if self.subresource else plural


@dataclass
class ForbidRule:
    verb: str
    resource: str
    namespace: str | None
    name: str | None

    def matches(self, info: RequestInfo) -> bool:
        res = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
        return ((self.verb in ("*", info.verb)) and self.resource in ("*", res)
                and self.namespace in (None, info.namespace) and self.name in (None, info.name))


class KubeEmulator:
    """The HTTP server (own thread and event loop) around a KubeStore."""

    def __init__(
        self,
        *,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
        token: str = "emulator-token",
        user: str = "system:serviceaccount:default:emulator-user",
        directory: str | Path | None = None,
        bookmark_interval: float | None = None,
        job_controller: bool = False,
        job_backoff: float = DEFAULT_JOB_BACKOFF,
        job_max_backoff: float = MAX_JOB_BACKOFF,
    ):
        self.store = KubeStore(namespaces)
        self.token, self.user = token, user
        self.bookmark_interval = bookmark_interval
        self._tmp = None if directory else tempfile.TemporaryDirectory(prefix="kube-emulator-")
        self.directory = Path(directory or self._tmp.name)
        self.kubeconfig_path = self.directory / "kubeconfig"
        self.requests: list[RequestInfo] = []
        # how long each write that called mutating webhooks waited for them (seconds); the
        # calls themselves (request written -> answer read) are `admission_call_seconds`
        self.admission_seconds: list[float] = []
        # the webhooks' clients: connections kept on the server's loop (kube_webhook_client)
        self._webhook_clients = WebhookClients()
        self.forbidden: list[ForbidRule] = []
        # authorizer(info) -> None to allow, or a reason string to answer 403.
        self.authorizer: Callable[[RequestInfo], str | None] | None = None
        # more identities (token -> user, authorizer), e.g. a component's service account
        # with the RBAC of its manifests while the test itself keeps the default identity
        self._identities: dict[str, tuple[str, Callable[[RequestInfo], str | None]]] = {}
        self.port = 0
        # graceful pod deletion: the emulated kubelet deletes a terminating pod after this
        # long (its containers stop at once), or holds it while `hold_terminations` is set
        self.termination_delay = 0.05
        self.hold_terminations = False
        self.namespace_termination_delay = 2.0
        self._terminating: list[tuple[str | None, str, str]] = []
        self._termination_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.ServerRunner | None = None
        self._stopping: asyncio.Event | None = None
        self.certs: ServingCerts | None = None
        # where the Services that admission webhooks name are served: (namespace, name) ->
        # a loopback (host, port), as a cluster's Service routing would take the call there
        self.service_endpoints: dict[tuple[str, str], tuple[str, int]] = {}
        self._job_controller_wanted = job_controller
        # the Job controller's pod failure backoff (seconds: the first delay, its cap), the
        # real controller's unless a test that only cares about the replacement lowers it
        self.job_backoff, self.job_max_backoff = job_backoff, job_max_backoff
        self.job_controller: JobController | None = None
        # the store's MutatingWebhookConfigurations until one of them changes (cleared by a
        # listener on the store `_listening`)
        self._mutating: list[dict] | None = None
        self._listening: KubeStore | None = None
        # (type, operation, subresource) -> (the configurations of `_mutating` it was
        # worked out from, those whose rules name such a write): `_webhooks`
        self._mutating_by_write: dict[tuple[ResourceType, str, str],
                                      tuple[list[dict], list[dict]]] = {}

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def admission_call_seconds(self) -> list[float]:
        """How long each webhook call took, its request written -> its answer read (what a
        real API server's admission webhook latency metric times); on the server's one
        event loop, so a busy loop's delay to resume the call is included."""
        return self._webhook_clients.seconds

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_path(self) -> Path:
        """The emulator's CA certificate (PEM): what a client verifies the server with."""
        return self.directory / "ca.crt"

    def start(self) -> KubeEmulator:
        self.certs = make_serving_certs(self.directory)
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            # uvloop: its TLS and transports are compiled, where asyncio's SSL layer is
            # Python; the server thread's fixed cost per HTTPS request was most of its CPU
            # (docs/dependencies.md)
            loop = uvloop.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve(ready))
            except BaseException as exc:  # surfaced to start()
                errors.append(exc)
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="kube-emulator", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors or not self.port:
            raise RuntimeError(
                f"kube emulator failed to start: {errors[0] if errors else 'timeout'}"
            )
        self._write_kubeconfig()
        if self._job_controller_wanted:
            self.start_job_controller()
        return self

    def start_job_controller(self, *, backoff: float | None = None,
                             max_backoff: float | None = None) -> JobController:
        """Run the emulated Job controller (kube_job_controller), as its own identity; its
        pod failure backoff `backoff` doubled per failure up to `max_backoff` (seconds; by
        default the constructor's, the real controller's 10 s and 6 min)."""
        if backoff is not None:
            self.job_backoff = backoff
        if max_backoff is not None:
            self.job_max_backoff = max_backoff
        if self.job_controller is None:
            token = self._add_token(JOB_CONTROLLER_USER, lambda info: None)
            assert self._loop is not None, "start() the emulator first"
            api = LocalClient(self._handle, self._loop, token,
                              "kube-controller-manager/job-controller (emulated)")
            self.job_controller = JobController(self.store, api, backoff=self.job_backoff,
                                                max_backoff=self.job_max_backoff).start()
        return self.job_controller

    async def _serve(self, ready: threading.Event) -> None:
        # aiohttp's low-level server: every path goes to one handler, so the application
        # layer (router, middlewares, per-request application state) would only add cost
        # to each request of a burst
        loop = asyncio.get_running_loop()

        def request(message, payload, protocol, writer, task):  # type: ignore[no-untyped-def]
            return web.BaseRequest(message, payload, protocol, writer, task, loop,
                                   client_max_size=16 * 1024 * 1024)

        # its connections corked (kube_corked): the answers to a client's pipelined
        # requests leave in one TLS write
        server = CorkedServer(self._handle, request_factory=request, access_log=None)
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        assert self.certs is not None
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.certs.server_context())
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._stopping = asyncio.Event()
        ready.set()
        await self._stopping.wait()
        self.store.close_all_watches()
        self._webhook_clients.close()
        await self._runner.cleanup()

    def stop_job_controller(self) -> None:
        """Stop the emulated Job controller (as a kube-controller-manager that is down):
        nothing syncs Jobs until `start_job_controller` starts a new one, which lists what
        changed meanwhile."""
        if self.job_controller is not None:
            self.job_controller.stop()
            self.job_controller = None

    def stop(self) -> None:
        self.stop_job_controller()
        if self._loop and self._stopping and self._thread and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(10)
        if self._tmp:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_identity(
        self, user: str, authorizer: Callable[[RequestInfo], str | None]
    ) -> Path:
        """A second identity: requests with its token are authorized by `authorizer` (e.g.
        RbacAuthorizer.from_manifests(...) for a service account) and named `user` in 403s.
        Returns its kubeconfig (for api_client(kubeconfig=...) or a subprocess)."""
        token = self._add_token(user, authorizer)
        path = self.directory / f"kubeconfig-{len(self._identities)}"
        self._write_kubeconfig(path, token)
        return path

    def _add_token(self, user: str, authorizer: Callable[[RequestInfo], str | None]) -> str:
        """A bearer token that authenticates as `user`, authorized by `authorizer`."""
        token = f"identity-{len(self._identities)}-{base64.b32encode(user.encode()).decode()[:16]}"
        self._identities[token] = (user, authorizer)
        return token

    def _write_kubeconfig(self, path: Path | None = None, token: str | None = None) -> None:
        path = path or self.kubeconfig_path
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "emulator",
            "clusters": [
                {
                    "name": "emulator",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(
                            self.certs.ca_pem if self.certs else b""
                        ).decode(),
                    },
                }
            ],
            "users": [{"name": "emulator", "user": {"token": token or self.token}}],
            "contexts": [
                {"name": "emulator", "context": {"cluster": "emulator", "user": "emulator"}}
            ],
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

    def api_client(self, kubeconfig: Path | None = None):  # -> kubernetes.client.ApiClient
        """A real ``kubernetes`` ApiClient loaded from the kubeconfig this emulator wrote (or
        another identity's, from add_identity)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig_path))

    # -- direct state access (thread-safe; notifies watches; no auth) ------------------------
    def get(self, resource: str, name: str, namespace: str | None = None) -> dict:
        return self.store.get(resource, namespace, name)

    def list(self, resource: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict]:
        return self.store.list(
            resource, namespace, selector_predicate(label_selector, field_selector, resource)
        )[0]

    def create(self, resource: str, obj: dict, namespace: str | None = None) -> dict:
        return self.store.create(resource, namespace, obj)

    def update(self, resource: str, obj: dict, namespace: str | None = None) -> dict:
        meta = obj.get("metadata") or {}
        return self.store.update(resource, namespace or meta.get("namespace"), meta["name"], obj)

    def patch(
        self,
        resource: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: str = "strategic",
    ) -> dict:
        return self.store.patch(resource, namespace, name, patch, patch_type)

    def delete(
        self, resource: str, name: str, namespace: str | None = None,
        grace_period: int | None = None,
    ) -> dict:
        """Delete at once, or with `grace_period` as `kubectl delete` does (a bound pod then
        terminates: the emulated kubelet finishes it, see `hold_terminations`)."""
        if grace_period is None:
            return self.store.delete(resource, namespace, name)[0]
        obj, gone = self.store.delete(
            resource, namespace, name, {"gracePeriodSeconds": grace_period}, graceful=True
        )
        if not gone and resource == "pods":
            self._kubelet_stops(obj)
        return obj

    # -- the kubelet's part of a graceful pod deletion -------------------------------------
    def _kubelet_stops(self, pod: dict) -> None:
        """A pod was deleted gracefully: the kubelet stops its containers and then deletes it
        for good (grace 0). Here that takes `termination_delay` seconds, or waits for
        `finish_terminations()` while `hold_terminations` is set."""
        meta = pod["metadata"]
        key = (meta.get("namespace"), meta["name"], meta["uid"])
        with self._termination_lock:
            if self.hold_terminations:
                self._terminating.append(key)
                return
        timer = threading.Timer(self.termination_delay, self._finish_termination, key)
        timer.daemon = True
        timer.start()

    def _namespace_controller_empties(self, name: str) -> None:
        """A namespace was deleted: the namespace controller deletes everything in it and then
        the namespace, here after `namespace_termination_delay` seconds (on a cluster it
        takes seconds too: a client deleting the namespace's objects right after it, as
        `kubectl delete -k` does, finds them still there)."""
        def finish() -> None:
            try:
                self.store.delete("namespaces", None, name)
            except ApiError:
                pass  # already gone

        timer = threading.Timer(self.namespace_termination_delay, finish)
        timer.daemon = True
        timer.start()

    def _finish_termination(self, namespace: str | None, name: str, uid: str) -> None:
        try:
            self.store.delete("pods", namespace, name, {"preconditions": {"uid": uid}})
        except ApiError:
            pass  # already gone, or a new pod of that name

    def finish_terminations(self) -> int:
        """Let the kubelet finish every held graceful deletion now; returns how many."""
        with self._termination_lock:
            held, self._terminating = self._terminating, []
        for key in held:
            self._finish_termination(*key)
        return len(held)

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def add_node(
        self,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        ready: bool = True,
        unschedulable: bool = False,
        control_plane: bool = False,
        taints: list[dict] | None = None,
        cpu: str = "4",
        memory: str = "8Gi",
        address: str = "127.0.0.1",
    ) -> dict:
        """A node as the kubelet registers it (Ready condition, capacity, hostname label)."""
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
        taints = list(taints or [])
        if control_plane:
            labels["node-role.kubernetes.io/control-plane"] = ""
            taints.append({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
        spec: dict[str, Any] = {}
        if unschedulable:
            spec["unschedulable"] = True
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        if taints:
            spec["taints"] = taints
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": dict(annotations or {})},
            "spec": spec,
            "status": {
                "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "addresses": [
                    {"type": "InternalIP", "address": address},
                    {"type": "Hostname", "address": name},
                ],
                "conditions": [self._ready_condition(ready)],
                "nodeInfo": {
                    "kubeletVersion": "v1.33.0",
                    "kubeProxyVersion": "",
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "kernelVersion": "6.1.0",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "bootID": f"boot-{name}",
                    "machineID": f"machine-{name}",
                    "systemUUID": f"uuid-{name}",
                },
            },
        }
        return self.store.create("nodes", None, node)

    @staticmethod
    def _ready_condition(ready: bool) -> dict:
        return {
            "type": "Ready",
            "status": "True" if ready else "Unknown",
            "reason": "KubeletReady" if ready else "NodeStatusUnknown",
            "message": "kubelet is posting ready status"
            if ready
            else "Kubelet stopped posting node status.",
            "lastHeartbeatTime": now_rfc3339(),
            "lastTransitionTime": now_rfc3339(),
        }

    def set_node_ready(self, name: str, ready: bool) -> dict:
        """What the node lifecycle controller does when a kubelet stops (or resumes) reporting."""
        return self.store.patch(
            "nodes",
            None,
            name,
            {"status": {"conditions": [self._ready_condition(ready)]}},
            "strategic",
        )

    def set_pod_phase(self, name: str, phase: str, namespace: str = "default") -> dict:
        return self.store.patch("pods", namespace, name, {"status": {"phase": phase}}, "merge")

    # -- hooks -------------------------------------------------------------------------------
    def forbid(
        self, verb: str, resource: str, namespace: str | None = None, name: str | None = None
    ) -> ForbidRule:
        """Answer 403 for (verb, resource[/subresource]) e.g. ("get", "secrets"), ("create",
        "pods/binding")."""
        rule = ForbidRule(verb, resource, namespace, name)
        self.forbidden.append(rule)
        return rule

    def allow(self, rule: ForbidRule | None = None) -> None:
        """Remove one forbid rule, or all of them."""
        if rule is None:
            self.forbidden.clear()
        else:
            self.forbidden.remove(rule)

    def expire_watches(self, resource: str | None = None) -> int:
        return self.store.expire_watches(resource)

    def compact(self) -> int:
        return self.store.compact()

    def send_bookmarks(self, resource: str | None = None) -> int:
        return self.store.send_bookmarks(resource)

    def watch_count(self, resource: str | None = None) -> int:
        return len(self.store.watchers(resource))

    def wait_for_watches(self, resource: str, count: int = 1, timeout: float = 10.0) -> None:
        """Block until ``count`` watches on ``resource`` are open (replaces sleeps in tests)."""
        deadline = time.monotonic() + timeout
        while self.watch_count(resource) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"timed out after {timeout}s waiting for {count} watch(es) on {resource} "
                    f"(open: {self.watch_count(resource)})"
                )
            time.sleep(0.01)

    def count_requests(self, verb: str, resource: str) -> int:
        return sum(1 for r in list(self.requests) if r.verb == verb and r.resource == resource)

    # -- HTTP --------------------------------------------------------------------------------
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        auth = request.headers.get("Authorization") or ""
        token = auth.removeprefix("Bearer ")
        if auth == f"Bearer {self.token}":
            user, authorizer = self.user, self.authorizer
        elif auth.startswith("Bearer ") and token in self._identities:
            user, authorizer = self._identities[token]
        else:
            return self._status(ApiError(401, "Unauthorized", "Unauthorized"))
        try:
            if request.path.startswith(NOT_EMULATED_PATHS):
                raise not_emulated(request, "this endpoint of a real API server")
            discovery = self._openapi_v3(request.path) or self._discovery(request.path)
            if discovery is not None:
                if request.method != "GET":
                    raise ApiError(
                        405,
                        "MethodNotAllowed",
                        "the server does not allow this method on the requested resource",
                    )
                return kube_json.response(discovery)
            info = self._parse(request)
            self.requests.append(info)
            self._authorize(info, user, authorizer)
            return await self._dispatch(request, info, user)
        except (CrdNotEmulated, AdmissionNotEmulated) as exc:
            return self._status(not_emulated(request, str(exc)))
        except ApiError as exc:
            return self._status(exc)
        except SelectorError as exc:
            return self._status(bad_request(str(exc)))

    @staticmethod
    def _status(exc: ApiError) -> web.Response:
        return kube_json.response(exc.status(), status=exc.code)

    def _openapi_v3(self, path: str) -> dict | None:
        """The OpenAPI v3 documents as far as kubectl reads them: the index of group versions
        (``/openapi/v3``) and, per group version, each kind's PATCH operation with its
        ``x-kubernetes-group-version-kind`` and the ``fieldValidation`` query parameter, which
        is how kubectl learns that the server validates fields (cli-runtime
        query_param_verifier_v3.go). No schemas: kubectl then builds its strategic merge
        patches from its compiled-in types, which carry the same patch strategies."""
        if path.rstrip("/") == "/openapi/v3":
            gvs = sorted({("api/v1" if not r.group else f"apis/{r.group}/{r.version}")
                          for r in self.store.types.values()})
            return {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=emulator"}
                              for gv in gvs}}
        if not path.startswith("/openapi/v3/"):
            return None
        gv = path.removeprefix("/openapi/v3/").strip("/")
        paths = {}
        for r in list(self.store.types.values()):
            if gv != ("api/v1" if not r.group else f"apis/{r.group}/{r.version}"):
                continue
            scope = "/namespaces/{namespace}" if r.namespaced else ""
            paths[f"/{gv}{scope}/{r.plural}/{{name}}"] = {"patch": {
                "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version,
                                                    "kind": r.kind},
                "parameters": [{"name": "fieldValidation", "in": "query",
                                "schema": {"type": "string", "uniqueItems": True}}],
                "responses": {"200": {"description": "OK"}},
            }}
        if not paths:
            return None
        return {"openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
                "paths": paths, "components": {"schemas": {}}}

    def _discovery(self, path: str) -> dict | None:
        path = path.rstrip("/") or "/"
        if path.count("/") > 3:  # deeper than /apis/<group>/<version>: a resource
            return None
        if path == "/version":
            return SERVER_VERSION
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}
                ],
            }
        groups = sorted({(r.group, r.version) for r in list(self.store.types.values()) if r.group})
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                        "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
                    }
                    for g, v in groups
                ],
            }
        for g, v in [("", "v1"), *groups]:
            prefix = "/api/v1" if not g else f"/apis/{g}/{v}"
            if path == prefix:
                return self._resource_list(g, v)
            if g and path == f"/apis/{g}":
                return {"kind": "APIGroup", "apiVersion": "v1", "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                        "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}}
        if path == "/":
            return {
                "paths": ["/api", "/api/v1", "/apis", "/version"]
                + [f"/apis/{g}/{v}" for g, v in groups]
            }
        return None

    def _resource_list(self, group: str, version: str) -> dict:
        resources = []
        for r in list(self.store.types.values()):
            if r.group != group or r.version != version:
                continue
            verbs = ["create"] if r.plural == "bindings" else \
                ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
            entry: dict[str, Any] = {
                "name": r.plural,
                "singularName": r.singular or r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": verbs,
                "shortNames": list(r.short_names),
            }
            if r.categories:
                entry["categories"] = list(r.categories)
            resources.append(entry)
            for sub in r.subresources:
                entry = {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
                if sub == "binding":
                    entry.update(kind="Binding", verbs=["create"])
                elif sub == "eviction":  # kubectl drain looks for it here (policy/v1 Eviction)
                    entry.update(kind="Eviction", group="policy", version="v1", verbs=["create"])
                resources.append(entry)
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": version if not group else f"{group}/{version}",
            "resources": resources,
        }

    def _parse(self, request: web.BaseRequest) -> RequestInfo:
        types = self.store.types
        parts = [p for p in request.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, rest = parts[1], parts[3:]
            # the group version is served: the resource named is of it (the usual case, no
            # walk over every type), or another type is
            plural = rest[2] if len(rest) >= 3 and rest[0] == "namespaces" else \
                (rest[0] if rest else "")
            named = types.get(f"{plural}.{group}")
            if not (named is not None and named.group == group and
                    named.version == parts[2]) and \
                    not any(r.group == group and r.version == parts[2]
                            for r in list(types.values())):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ref = rest[0] if not group else f"{rest[0]}.{group}"
        rt = types.get(ref)
        if rt is None or (namespace is not None and not rt.namespaced) or \
                (group and rt.version != parts[2]):  # a group's other version
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({ref})"
            )
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub is not None and sub not in rt.subresources):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        query = dict(request.query)
        method = request.method
        watching = query.get("watch") in ("true", "1")
        if method == "GET":
            verb = "get" if name else ("watch" if watching else "list")
        elif method == "POST":
            verb = "create"
            if name and not sub:
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
        elif method == "PUT":
            verb = "update"
        elif method == "PATCH":
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        if verb in ("update", "patch") and not name:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        return RequestInfo(verb, ref, sub, namespace, name, rt.group, query)

    def _authorize(
        self,
        info: RequestInfo,
        user: str,
        authorizer: Callable[[RequestInfo], str | None] | None,
    ) -> None:
        reason = None
        if any(rule.matches(info) for rule in list(self.forbidden)):
            reason = "forbidden by the test"
        elif authorizer is not None:
            reason = authorizer(info)
        if reason is None:
            return
        # apierrors.NewForbidden names the group resource (no subresource) and the object;
        # the authorizer's message (responsewriters.forbiddenMessage) the subresource too
        what = f'{info.resource} "{info.name}"' if info.name else info.resource
        scope = (
            f' in the namespace "{info.namespace}"' if info.namespace else " at the cluster scope"
        )
        message = (
            f'{what} is forbidden: User "{user}" cannot {info.verb} resource '
            f'"{info.resource_path}" '
            f'in API group "{info.group}"{scope}'
        )
        if reason != "forbidden by the test":
            message += f": {reason}"
        raise ApiError(
            403,
            "Forbidden",
            message,
            {"name": info.name or "", "group": info.group,
             "kind": info.resource.split(".", 1)[0]},
        )

    async def _body(self, request: web.BaseRequest) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            ctype = request.headers.get("Content-Type", "")
            if "yaml" in ctype:
                return yaml.safe_load(raw)
            return kube_json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from exc

    def _webhooks(self, rt: ResourceType, operation: str, subresource: str | None) -> list[dict]:
        """The MutatingWebhookConfigurations that could apply to a write of `rt` (none for
        the configurations themselves: the API server never calls webhooks on them): those
        with a webhook whose rules name the operation, the resource and the subresource.
        A write no rule names skips admission and its decoding and matching (most writes:
        status, events, bindings; bench/workloads.py)."""
        if rt.group == "admissionregistration.k8s.io" or not self.store.count(MUTATING_REF):
            return []  # (the usual case costs no list on each write)
        configurations = self._mutating_configurations()
        # the answer depends only on the type, the operation and the configurations: kept
        # until one of them changes (cleared with them; keyed by the type itself, which a
        # CRD's update replaces)
        key = (rt, operation, subresource or "")
        cached = self._mutating_by_write.get(key)
        if cached is not None and cached[0] is configurations:
            return cached[1]
        probe = Attributes(operation, rt, subresource or "", "", "", {}, None, "", False)
        named = [c for c in configurations
                 if any(rule_matches(rule, probe) for hook in c.get("webhooks") or []
                        for rule in hook.get("rules") or [])]
        self._mutating_by_write[key] = (configurations, named)
        return named

    def _mutating_configurations(self) -> list[dict]:
        """The stored MutatingWebhookConfigurations, listed (copied) again only after one of
        them changed: a copy per write was a tenth of the server's CPU in a burst. Callers
        only read them."""
        store = self.store  # (a bench may swap the store before starting)
        if self._listening is not store:
            store.listeners.append(self._mutating_changed)
            self._listening, self._mutating = store, None
        cached = self._mutating
        if cached is None:
            with store.lock:  # (the listener clears it under the same lock)
                cached = self._mutating = store.list(MUTATING_REF)[0]
        return cached

    def _mutating_changed(self, change: Change) -> None:
        if change.ref == MUTATING_REF:
            self._mutating = None

    async def _admitted(self, operation: str, rt: ResourceType, info: RequestInfo, obj: dict,
                        old: dict | None, user: str, configurations: list[dict]) -> dict:
        """`obj` after the mutating webhooks (kube_admission), asked from the server's loop
        (kube_webhook_client), which keeps serving meanwhile: a webhook may call the API
        itself."""
        if not isinstance(obj, dict):
            raise bad_request("the request body must be a JSON object")
        meta = obj.setdefault("metadata", {})
        if rt.namespaced and info.namespace:
            meta.setdefault("namespace", info.namespace)
        obj.setdefault("apiVersion", rt.api_version)
        obj.setdefault("kind", rt.kind)
        self.store.decode(rt.ref, obj)
        attrs = Attributes(operation, rt, info.subresource or "", info.namespace or "",
                           info.name or meta.get("name", ""), obj, old, user,
                           "dryRun" in info.query)

        def labels(namespace: str) -> dict | None:
            """The namespace's labels (the stored ones: selectors only read them)."""
            try:
                return self.store.get("namespaces", None, namespace,
                                      copy=False)["metadata"].get("labels")
            except ApiError:
                return None

        # no webhook's rules and selectors take the object as submitted: admission would
        # return it as it is, so the write skips it (an admitted
        # Job's pods, 8 creates per workload in bench/workloads.py, are left out by the
        # pods webhook's objectSelector)
        looked_up: list[dict | None] = []

        def namespace() -> dict | None:  # looked up once, and only when a selector asks
            if not looked_up:
                looked_up.append(labels(attrs.namespace) if rt.namespaced and
                                 attrs.namespace else None)
            return looked_up[0]

        if not any(matches(hook, attrs, namespace) for c in configurations
                   for hook in c.get("webhooks") or []):
            return obj
        start = time.monotonic()
        try:
            return await admit(attrs, configurations, labels, self.service_endpoints,
                               self._webhook_clients)
        finally:  # as the API server's admission webhook latency metric sees it
            self.admission_seconds.append(time.monotonic() - start)

    def _refuse_unemulated_admission(self, request: web.BaseRequest, rt: ResourceType,
                                     info: RequestInfo, user: str) -> None:
        """What a real API server would send to webhooks and the emulator does not: a DELETE
        to the mutating webhooks whose rules name it, and any write to validating webhooks
        (stored, never called). 501 rather than a write no webhook saw."""
        if rt.group == "admissionregistration.k8s.io":
            return
        operation = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE"}.get(
            info.verb, "DELETE")
        kinds = [(VALIDATING_REF, "validating")]
        if operation == "DELETE":
            kinds.append((MUTATING_REF, "mutating"))
        kinds = [(ref, kind) for ref, kind in kinds if self.store.count(ref)]
        if not kinds:  # (the usual case: nothing to look at)
            return
        probe = Attributes(operation, rt, info.subresource or "", info.namespace or "",
                           info.name or "", {}, None, user, False)
        for ref, kind in kinds:
            for config in self.store.list(ref)[0]:
                for hook in config.get("webhooks") or []:
                    if any(rule_matches(rule, probe) for rule in hook.get("rules") or []):
                        raise not_emulated(request, f"the {operation} admission of {kind} "
                                           f'webhook "{hook.get("name")}"')

    async def _patch_admitted(self, rt: ResourceType, info: RequestInfo, body: Any,
                              patch_type: str, user: str, configurations: list[dict]) -> dict:
        """A patch through the mutating webhooks: the patched object is admitted, then
        written if the object did not change meanwhile (else again, as the API server's
        GuaranteedUpdate retries its update function)."""
        for attempt in range(8):
            old, new, precondition = self.store.patched(info.resource, info.namespace,
                                                        info.name, body, patch_type)  # type: ignore[arg-type]
            new = await self._admitted("UPDATE", rt, info, new, old, user, configurations)
            new["metadata"]["resourceVersion"] = precondition or old["metadata"]["resourceVersion"]
            try:
                return self.store.update(info.resource, info.namespace, info.name, new,  # type: ignore[arg-type]
                                         subresource=info.subresource, as_client=True,
                                         owned=True)  # (the patch's own object)
            except ApiError as exc:
                if exc.code != 409 or precondition or attempt == 7:
                    raise
        raise AssertionError("unreachable")

    async def _dispatch(self, request: web.BaseRequest, info: RequestInfo,
                        user: str = "") -> web.StreamResponse:
        store, rt, q = self.store, self.store.resource(info.resource), info.query
        if info.verb == "get":
            try:
                obj = store.get(info.resource, info.namespace, info.name)  # type: ignore[arg-type]
            except ApiError as exc:
                other = self._other_event_api(rt)
                if exc.code != 404 or other is None:
                    raise
                try:  # an Event written through the other Event API: the same object
                    obj = other[1](store.get(other[0], info.namespace, info.name))  # type: ignore[arg-type]
                except ApiError:
                    raise exc from None
            if info.subresource == "binding":
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            if rt.ref == "poddisruptionbudgets.policy":
                obj = self._current_budget(obj)
            if wants_table(request.headers.get("Accept", "")):
                return kube_json.response(self._table(request, rt, [obj], {
                    "resourceVersion": obj["metadata"].get("resourceVersion", "")}))
            return kube_json.response(obj)
        if info.verb == "list":
            initial_events(q, watch=False)
            listed = self._list(rt, info)
            if rt.ref == "poddisruptionbudgets.policy":
                listed["items"] = [self._current_budget(p) for p in listed["items"]]
            if wants_table(request.headers.get("Accept", "")):
                return kube_json.response(
                    self._table(request, rt, listed["items"], listed["metadata"])
                )
            return kube_json.response(listed)
        if info.verb == "watch":
            return await self._watch(request, rt, info)
        body = await self._body(request)
        self._refuse_unemulated_admission(request, rt, info, user)
        dry_run = "dryRun" in q
        warnings = self._check_fields(request, rt, info, body)
        # a JSON body was parsed for this request (no object in it twice, as YAML aliases
        # can make): the store keeps it, and a write's response is the stored object,
        # serialized at once (no copy either way; stored objects are only replaced)
        owned = "yaml" not in request.headers.get("Content-Type", "")
        if info.verb == "create":
            if body is None:
                raise bad_request("the request body is required")
            if info.subresource in ("binding", "eviction") and any(
                    matches(hook, Attributes("CREATE", rt, info.subresource, info.namespace or "",
                                             info.name or "", body, None, user, dry_run), None)
                    for c in self._webhooks(rt, "CREATE", info.subresource)
                    for hook in c.get("webhooks") or []):
                raise not_emulated(request, f"mutating webhooks on {rt.plural}/{info.subresource}")
            if info.subresource == "binding":
                result = store.bind(info.namespace, info.name, body)  # type: ignore[arg-type]
                return kube_json.response(result, status=201)
            if info.subresource == "eviction":
                try:
                    result, pod = evict(store, info.namespace, info.name, body)  # type: ignore[arg-type]
                except BudgetNotEmulated as exc:
                    raise not_emulated(request, str(exc)) from None
                if pod["metadata"].get("deletionGracePeriodSeconds"):
                    self._kubelet_stops(pod)
                return kube_json.response(result, status=201)
            if rt.plural == "bindings":
                result = store.bind(
                    info.namespace, (body.get("metadata") or {}).get("name", ""), body
                )
                return kube_json.response(result, status=201)
            if rt.ref == "pods" and isinstance(body, dict):  # the Priority plugin runs before
                # MutatingAdmissionWebhook (the server's plugin order, kube_priority.py)
                admit_pod_priority(body, store.list(PRIORITY_REF, copy=False)[0])
            configurations = self._webhooks(rt, "CREATE", info.subresource)
            if configurations:
                body = await self._admitted("CREATE", rt, info, body, None, user, configurations)
            obj = store.create(info.resource, info.namespace, body, as_client=True,
                               dry_run=dry_run, owned=owned)
            return _warned(warnings, kube_json.response(obj, status=201))
        if info.verb == "update":
            if body is None:
                raise bad_request("the request body is required")
            configurations = self._webhooks(rt, "UPDATE", info.subresource)
            if configurations:
                old = store.get(info.resource, info.namespace, info.name)  # type: ignore[arg-type]
                body = await self._admitted("UPDATE", rt, info, body, old, user, configurations)
            obj = store.update(info.resource, info.namespace, info.name, body,  # type: ignore[arg-type]
                               subresource=info.subresource, as_client=True, owned=owned)
            return _warned(warnings, kube_json.response(obj))
        if info.verb == "patch":
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            kinds = {"application/json-patch+json": "json", "application/merge-patch+json": "merge",
                     "application/strategic-merge-patch+json": "strategic"}
            if rt.ref in store.custom:  # no patch strategies in a CRD's schema (the
                # customresource handler's supported patch types)
                kinds.pop("application/strategic-merge-patch+json")
            if ctype not in kinds:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types "
                    f"include: {', '.join(kinds)}",
                )
            configurations = self._webhooks(rt, "UPDATE", info.subresource)
            if configurations:
                obj = await self._patch_admitted(rt, info, body, kinds[ctype], user,
                                                 configurations)
                return _warned(warnings, kube_json.response(obj))
            obj = store.patch(info.resource, info.namespace, info.name, body, kinds[ctype],  # type: ignore[arg-type]
                              subresource=info.subresource, as_client=True, copy=False)
            return _warned(warnings, kube_json.response(obj))
        if info.verb == "delete":
            options = dict(body) if isinstance(body, dict) else {}
            if "gracePeriodSeconds" in q:  # the query parameter wins, as in the API server
                options["gracePeriodSeconds"] = q["gracePeriodSeconds"]
            obj, gone = store.delete(info.resource, info.namespace, info.name, options,
                                     graceful=True)
            if not gone and rt.ref == "pods" and obj["metadata"].get("deletionGracePeriodSeconds"):
                self._kubelet_stops(obj)
            if not gone and rt.ref == "namespaces":
                self._namespace_controller_empties(obj["metadata"]["name"])
            if gone and rt.ref == "jobs.batch" and self.job_controller is not None:
                policy = q.get("propagationPolicy") or options.get("propagationPolicy")
                if policy is None and str(options.get("orphanDependents", "")).lower() != \
                        "false":
                    policy = "Orphan"  # batch/v1 Job's DefaultGarbageCollectionPolicy
                self.job_controller.collect(obj, policy or "Background")
            if not gone or rt.ref in RETURNS_DELETED_OBJECT:
                return kube_json.response(obj)
            return kube_json.response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {
                        "name": info.name,
                        "group": rt.group,
                        "kind": rt.plural,
                        "uid": obj["metadata"]["uid"],
                    },
                }
            )
        if info.verb == "deletecollection":
            items = self._list(rt, info)["items"]
            for item in items:
                try:
                    store.delete(
                        info.resource, item["metadata"].get("namespace"), item["metadata"]["name"]
                    )
                except ApiError:
                    pass
            return kube_json.response(
                {
                    "kind": f"{rt.kind}List",
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(store.rv)},
                    "items": items,
                }
            )
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    def _current_budget(self, pdb: dict) -> dict:
        """A PodDisruptionBudget with the status the disruption controller keeps current
        (computed when read; see kube_eviction.budget_status)."""
        try:
            return {**pdb, "status": budget_status(self.store, pdb)}
        except BudgetNotEmulated:
            return pdb

    def _check_fields(self, request: web.BaseRequest, rt: ResourceType, info: RequestInfo,
                      body: Any) -> list[str]:
        """``fieldValidation``: Strict answers 400 on unknown fields (apiserver
        pkg/endpoints/handlers/create.go, patch.go: the ``strict decoding error`` Status),
        Warn returns them as warnings; Ignore and Warn drop them, as decoding into the
        typed object does. Without the parameter (the official Python client, whose models
        cannot carry an unknown field) nothing is checked: that costs nothing per write.
        Only bodies that are objects of the kind are checked (a JSON patch is a list of
        operations; subresources have their own kinds)."""
        mode = info.query.get("fieldValidation")
        if mode not in (None, "Ignore", "Warn", "Strict"):
            raise bad_request(
                f'fieldValidation must be one of "Ignore", "Warn", or "Strict", got "{mode}"'
            )
        if (mode is None or info.verb not in ("create", "update", "patch")
                or not isinstance(body, dict) or info.subresource):
            return []
        obj = {**body, "apiVersion": rt.api_version, "kind": rt.kind}
        custom = self.store.custom.get(rt.ref)
        if custom is not None:  # what pruning drops is what a strict decoder refuses
            messages = [f'unknown field "{p}"' for p in prune(json_copy(obj), custom.schema)]
            if messages and mode == "Strict":
                raise bad_request(f"strict decoding error: {', '.join(messages)}")
            return [] if mode == "Ignore" else messages  # the store prunes them
        try:
            paths = [p for p in unknown_field_paths(obj) if not str(p[-1]).startswith("$")]
        except NoSchema:
            raise not_emulated(request, f"field validation of {rt.ref}") from None
        messages = [f'unknown field "{field_name(p)}"' for p in paths]
        if messages and mode == "Strict":
            raise bad_request(f"strict decoding error: {', '.join(messages)}")
        drop_fields(body, paths)  # decoding into the typed object drops them
        if mode == "Ignore":
            return []
        return messages

    def _table(self, request: web.BaseRequest, rt: ResourceType, items: list[dict],
               list_meta: dict) -> dict:
        custom = self.store.custom.get(rt.ref)
        if custom is not None:
            return custom_table(custom.columns, items, list_meta,
                                request.query.get("includeObject"))
        try:
            return table(rt.ref, items, list_meta, request.query.get("includeObject"))
        except PrintingNotEmulated:
            raise not_emulated(request, f"server-side printing (as=Table) of {rt.ref}") from None

    @staticmethod
    def _other_event_api(rt: ResourceType) -> tuple[str, Callable[[dict], dict]] | None:
        """For an Event resource: the other Event API's resource and the conversion of its
        objects into this one's shape (both are one stored Event on a real server)."""
        if rt.ref == "events":
            return "events.events.k8s.io", as_core_event
        if rt.ref == "events.events.k8s.io":
            return "events", as_events_event
        return None

    def _list(self, rt: ResourceType, info: RequestInfo) -> dict:
        q = info.query
        matches = selector_predicate(q.get("labelSelector"), q.get("fieldSelector"), rt.ref)
        rv_asked, rv_match = q.get("resourceVersion"), q.get("resourceVersionMatch")
        if rv_match == "Exact" and rv_asked and int(rv_asked) < self.store.compacted_rv:
            raise ApiError(
                410,
                "Expired",
                f"too old resource version: {rv_asked} ({self.store.compacted_rv + 1})",
            )
        items, rv = self.store.list(rt.ref, info.namespace, matches)
        other = self._other_event_api(rt)
        if other is not None:  # the Events written through the other Event API too
            theirs = [other[1](e) for e in self.store.list(other[0], info.namespace)[0]]
            items = sorted(items + [e for e in theirs if matches(e)], key=lambda i: (
                i["metadata"].get("namespace", ""), i["metadata"]["name"]))
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        start: tuple[str, str] | None = None
        if q.get("continue"):
            try:
                token = json.loads(base64.urlsafe_b64decode(q["continue"]))
                start, token_rv = tuple(token["start"]), int(token["rv"])
            except (ValueError, KeyError, TypeError) as exc:
                raise bad_request(f"invalid continue token: {exc}") from exc
            if token_rv < self.store.compacted_rv:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent "
                    "list result. You can start a new list without the continue parameter.",
                )
            items = [
                i
                for i in items
                if (i["metadata"].get("namespace", ""), i["metadata"]["name"]) > start
            ]
            meta["resourceVersion"] = str(token_rv)
        limit = int(q.get("limit") or 0)
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps(
                    {
                        "rv": int(meta["resourceVersion"]),
                        "start": [last.get("namespace", ""), last["name"]],
                    }
                ).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": meta,
            "items": items,
        }

    # A watch's events go out in writes of up to this many bytes (one HTTP chunk each),
    # as a real API server's buffered writer sends them: an HTTP/2 frame holds at most
    # 16 KiB by default. Far bigger chunks would be unlike a server's, and the client's
    # line splitter (kubernetes.watch.iter_resp_lines) copies the rest of a chunk per
    # line: a chunk of 500 pod events cost the binder a tenth of its CPU.
    WATCH_CHUNK = 16 * 1024

    async def _write_events(self, response: web.StreamResponse, events: list[dict]) -> None:
        chunk: list[bytes] = []
        size = 0
        for event in events:
            line = kube_json.dumps(event) + b"\n"
            if chunk and size + len(line) > self.WATCH_CHUNK:
                await response.write(b"".join(chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line)
        await response.write(b"".join(chunk))

    async def _watch(
        self, request: web.BaseRequest, rt: ResourceType, info: RequestInfo
    ) -> web.StreamResponse:
        q = info.query
        other = self._other_event_api(rt)
        if other is not None and self.store.list(other[0], info.namespace)[0]:
            raise not_emulated(request, "a watch of Events that were written through the "
                               "other Event API (the emulator stores the two apart)")
        initial = initial_events(q, watch=True)
        matches = selector_predicate(q.get("labelSelector"), q.get("fieldSelector"), rt.ref)
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else 1800.0
        start = self.store.open_watch(rt.ref, info.namespace, matches, q.get("resourceVersion"),
                                      asyncio.get_running_loop(), initial)
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)

        async def send(event: dict) -> None:
            await self._write_events(response, [event])

        def bookmark(rv: int) -> dict:
            return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                                   "metadata": {"resourceVersion": str(rv)}}}

        try:
            if start.gone is not None:
                await send(
                    {"type": "ERROR", "object": ApiError(410, "Expired", start.gone).status()}
                )
                return response
            watcher = start.watcher
            assert watcher is not None
            if start.events:  # the replay or the current state: in chunks, as any burst
                await self._write_events(response, start.events)
            if initial and bookmarks:  # a watch-list's state is all sent (kube_list_options)
                await send(end_of_initial_events(rt, start.rv))
            deadline = time.monotonic() + timeout
            next_bookmark = time.monotonic() + (self.bookmark_interval or 0)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if bookmarks:
                        await send(bookmark(self.store.rv))
                    break
                # Wake up now and then to notice clients that went away (aiohttp does not cancel
                # handlers on disconnect), so watch_count() only counts live watches.
                wait = min(remaining, self.bookmark_interval or 0.25, 0.25)
                items = await watcher.take(wait)
                if not items:
                    if request.transport is None or request.transport.is_closing():
                        return response
                    if bookmarks and self.bookmark_interval and time.monotonic() >= next_bookmark:
                        next_bookmark = time.monotonic() + self.bookmark_interval
                        await send(bookmark(self.store.rv))
                    continue
                # everything queued goes out in few writes (a burst of changes: not one
                # syscall per event)
                out: list[dict] = []
                ending = False
                for item in items:
                    if item[0] == "change":
                        event = watcher.event_for(item[1])
                        if event is not None:
                            out.append(event)
                    elif item[0] == "bookmark":
                        if bookmarks:
                            out.append(bookmark(item[1]))
                    elif item[0] == "gone":
                        out.append(
                            {"type": "ERROR", "object": ApiError(410, "Expired", item[1]).status()}
                        )
                        ending = True
                        break
                    else:  # close
                        ending = True
                        break
                if out:
                    await self._write_events(response, out)
                if ending:
                    break
        except ConnectionResetError:
            return response
        finally:
            if start.watcher is not None:
                self.store.close_watch(start.watcher)
        try:
            await response.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass
        return response
