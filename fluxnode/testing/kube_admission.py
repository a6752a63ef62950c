"""Mutating admission webhooks, called as the API server calls them.

A MutatingWebhookConfiguration (admissionregistration.k8s.io/v1) is stored like any object
and checked when written as pkg/apis/admissionregistration/validation/validation.go checks
it (`configuration_causes`). On every create and update the emulator then asks each webhook
whose rules match (configurations by name, webhooks in order; k8s.io/apiserver
pkg/admission/plugin/webhook):

- **matching** (predicates/rules/rules.go, predicates/object, predicates/namespace):
  ``operations``, ``apiGroups``, ``apiVersions``, ``resources`` (``pods`` is the main
  resource only, ``pods/status`` or ``*/status`` a subresource, ``*/*`` everything) and
  ``scope``; ``objectSelector`` on the object's labels (or the old object's); and
  ``namespaceSelector`` on the labels of the object's namespace (the namespace strategy
  labels each with ``kubernetes.io/metadata.name``), or of a Namespace itself;
- **the call** (mutating/dispatcher.go, pkg/util/webhook): an AdmissionReview v1 POSTed over
  HTTPS to ``clientConfig.url`` or to ``https://NAME.NAMESPACE.svc:PORT/PATH`` for
  ``clientConfig.service``, which the test routes to a loopback port
  (``KubeEmulator.service_endpoints``); the server certificate is verified with the
  ``caBundle`` for that host name; ``?timeout=Ns`` from ``timeoutSeconds`` (default 10);
- **the answer**: ``allowed: false`` refuses the request with the webhook's status
  (``admission webhook "NAME" denied the request: MESSAGE``, its code, at least 400;
  webhookerrors.ToStatusErr); a ``JSONPatch`` is applied to the object the next webhook and
  then validation see; a call that fails (refused, timed out, a bad certificate, a malformed
  review) is ``Internal error occurred: failed calling webhook "NAME": failed to call
  webhook: ...`` (500) under ``failurePolicy: Fail`` (the default) and skipped under
  ``Ignore``; a webhook with side effects refuses a dry run (400);
- ``reinvocationPolicy: IfNeeded``: such a webhook is called once more when a webhook after it
  changed the object (reinvocation.go).

``matchConditions`` (CEL) are not emulated, nor are DELETE requests sent to webhooks, nor
validating webhooks (their configurations are stored): a configuration with matchConditions
is answered 501 when written, a DELETE a mutating webhook's rules name and any write a
validating webhook's rules name are answered 501.
"""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fluxnode.testing import kube_json
from fluxnode.testing.kube_patch import PatchError, json_patch
from fluxnode.testing.kube_selectors import LabelSelector, SelectorError
from fluxnode.testing.kube_types import ApiError, ResourceType
from fluxnode.testing.kube_webhook_client import CallFailed, Endpoint, WebhookClients

MUTATING_REF = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
VALIDATING_REF = "validatingwebhookconfigurations.admissionregistration.k8s.io"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_TIMEOUT, MAX_TIMEOUT = 10, 30


class AdmissionNotEmulated(Exception):
    """A webhook configuration asks for something the emulator does not do (501)."""


# -- the configuration's defaults and validation -----------------------------------------------
def default_configuration(config: dict) -> None:
    """Set what pkg/apis/admissionregistration/v1/defaults.go defaults (in place): failure
    policy Fail, match policy Equivalent, empty selectors, a 10 s timeout, reinvocation Never,
    rules of scope ``*``, a Service's port 443."""
    mutating = config.get("kind") == "MutatingWebhookConfiguration"
    for hook in config.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", DEFAULT_TIMEOUT)
        if mutating:
            hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)


def configuration_causes(config: dict) -> list[tuple[str, str]]:
    """What validation.go refuses in a webhook configuration, as (field, message)."""
    causes: list[tuple[str, str]] = []
    names: set[str] = set()
    for i, hook in enumerate(config.get("webhooks") or []):
        where = f"webhooks[{i}]"
        name = hook.get("name") or ""
        if not name:
            causes.append((f"{where}.name", "Required value"))
        elif name.count(".") < 2:
            causes.append((f"{where}.name", f'Invalid value: "{name}": should be a domain '
                                            "with at least three segments separated by dots"))
        elif name in names:
            causes.append((f"{where}.name", f'Duplicate value: "{name}"'))
        names.add(name)
        if hook.get("matchConditions"):
            raise AdmissionNotEmulated(f"the matchConditions of webhook {name!r} (CEL)")
        if hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            causes.append((f"{where}.sideEffects",
                           f"Unsupported value: \"{hook.get('sideEffects') or ''}\": "
                           'supported values: "None", "NoneOnDryRun"'))
        versions = hook.get("admissionReviewVersions") or []
        if not versions:
            causes.append((f"{where}.admissionReviewVersions",
                           "Required value: must specify one of v1, v1beta1"))
        elif "v1" not in versions:
            raise AdmissionNotEmulated(f"AdmissionReview {versions} of webhook {name!r} "
                                       "(only v1 is emulated)")
        timeout = hook.get("timeoutSeconds")
        if timeout is not None and not 1 <= int(timeout) <= MAX_TIMEOUT:
            causes.append((f"{where}.timeoutSeconds", f"Invalid value: {timeout}: the timeout "
                                                      "value must be between 1 and 30 seconds"))
        client = hook.get("clientConfig") or {}
        if bool(client.get("url")) == bool(client.get("service")):
            causes.append((f"{where}.clientConfig", "Required value: exactly one of url or "
                                                    "service is required"))
        elif client.get("url") and urlsplit(client["url"]).scheme != "https":
            causes.append((f"{where}.clientConfig.url", f'Invalid value: "{client["url"]}": '
                                                        "'https' is the only allowed URL scheme"))
        policy = hook.get("failurePolicy", "Fail")
        if policy not in ("Fail", "Ignore"):
            causes.append((f"{where}.failurePolicy", f'Unsupported value: "{policy}": '
                                                     'supported values: "Fail", "Ignore"'))
    return causes


# -- matching --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attributes:
    """One request, as admission sees it (admission.Attributes)."""

    operation: str  # CREATE UPDATE
    type: ResourceType
    subresource: str
    namespace: str
    name: str
    obj: dict
    old: dict | None
    user: str
    dry_run: bool


def rule_matches(rule: dict, attrs: Attributes) -> bool:
    """Whether one of a webhook's rules names the request (rules.go Matcher.Matches)."""
    def has(values: list | None, value: str) -> bool:
        return bool(values) and ("*" in values or value in values)  # type: ignore[operator]

    rt = attrs.type
    if not (has(rule.get("operations"), attrs.operation) and has(rule.get("apiGroups"), rt.group)
            and has(rule.get("apiVersions"), rt.version)):
        return False
    scope = rule.get("scope", "*")
    cluster = not rt.namespaced or rt.ref == "namespaces"
    if scope != "*" and scope != ("Cluster" if cluster else "Namespaced"):
        return False
    for resource in rule.get("resources") or []:
        res, _, sub = resource.partition("/")
        if res in ("*", rt.plural) and sub in ("*", attrs.subresource):
            return True
    return False


# A webhook's selectors, parsed once: id(selector object) -> (that object, kept so its id
# is not reused while the entry stands; the parsed selector). The objects are parts of
# stored configurations, which a write replaces and never changes, so a configuration
# written anew is parsed anew; one that does not parse is refused each time it is met.
_SELECTORS: dict[int, tuple[Any, LabelSelector]] = {}
_SELECTORS_KEPT = 256
_SELECTORS_LOCK = threading.Lock()


def _selector(selector: dict | None) -> LabelSelector:
    """`LabelSelector.from_object(selector)`, parsed once per selector object."""
    if selector is None:
        return LabelSelector.from_object(None)
    kept = _SELECTORS.get(id(selector))
    if kept is not None and kept[0] is selector:
        return kept[1]
    parsed = LabelSelector.from_object(selector)
    with _SELECTORS_LOCK:
        if len(_SELECTORS) >= _SELECTORS_KEPT:
            _SELECTORS.clear()
        _SELECTORS[id(selector)] = (selector, parsed)
    return parsed


def matches(hook: dict, attrs: Attributes,
            namespace_labels: Callable[[], dict | None]) -> bool:
    """Whether a webhook is called for a request (its rules, then its selectors; the
    namespace's labels asked for only when the rest matched)."""
    if not any(rule_matches(rule, attrs) for rule in hook.get("rules") or []):
        return False
    try:
        objects = _selector(hook.get("objectSelector"))
        namespaces = _selector(hook.get("namespaceSelector"))
    except SelectorError as exc:
        raise ApiError(500, "InternalError", f"Internal error occurred: {exc}") from None
    if not any(objects.matches((o.get("metadata") or {}).get("labels"))
               for o in (attrs.obj, attrs.old) if o is not None):
        return False
    if attrs.type.ref == "namespaces":
        return namespaces.matches((attrs.obj.get("metadata") or {}).get("labels"))
    if not attrs.type.namespaced:
        return True
    return namespaces.matches(namespace_labels() or {})


# -- calling ---------------------------------------------------------------------------------
def _endpoint(hook: dict, timeout: int,
              services: dict[tuple[str, str], tuple[str, int]]) -> tuple[Endpoint, str, str]:
    """(where to connect, request path, the URL errors name) of a webhook."""
    client = hook.get("clientConfig") or {}
    bundle = client.get("caBundle") or ""
    if client.get("url"):
        url = urlsplit(client["url"])
        host, port = url.hostname or "", url.port or 443
        if host not in LOOPBACK:
            raise CallFailed(f'Post "{client["url"]}": the API emulator calls only loopback '
                             "addresses")
        path = f"{url.path or '/'}?timeout={timeout}s"
        return Endpoint(host, port, host, bundle), path, f"https://{url.netloc}{path}"
    service = client["service"]
    namespace, name = service.get("namespace", ""), service.get("name", "")
    port = int(service.get("port") or 443)
    server = f"{name}.{namespace}.svc"
    path = f"{service.get('path') or '/'}?timeout={timeout}s"
    url = f"https://{server}:{port}{path}"
    address = services.get((namespace, name))
    if address is None:
        raise CallFailed(f'Post "{url}": service "{namespace}/{name}" has no endpoint the API '
                         "emulator knows (KubeEmulator.service_endpoints)")
    return Endpoint(address[0], address[1], server, bundle), path, url


async def call(hook: dict, review: dict, services: dict[tuple[str, str], tuple[str, int]],
               clients: WebhookClients) -> dict:
    """POST the AdmissionReview to the webhook (kube_webhook_client: kept connections, as
    the API server keeps a client per webhook); its ``response``, or CallFailed."""
    timeout = int(hook.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    endpoint, path, url = _endpoint(hook, timeout, services)
    status, body = await clients.post(endpoint, path, kube_json.dumps(review), timeout, url)
    if status != 200:
        raise CallFailed(f"the server responded with the status code {status} (not 200)")
    try:
        answer = kube_json.loads(body)
        response = answer["response"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CallFailed(f"could not read the AdmissionReview it answered: {exc}") from None
    if answer.get("apiVersion") != "admission.k8s.io/v1" or answer.get("kind") != \
            "AdmissionReview":
        raise CallFailed(f'expected webhook response of admission.k8s.io/v1, Kind='
                         f'AdmissionReview, got {answer.get("apiVersion")}, Kind='
                         f'{answer.get("kind")}')
    if not isinstance(response, dict) or response.get("uid") != review["request"]["uid"]:
        got = response.get("uid") if isinstance(response, dict) else None
        raise CallFailed(f'expected response.uid="{review["request"]["uid"]}", got '
                         f'"{got}"')
    return response


def review_for(attrs: Attributes) -> dict:
    """The AdmissionReview v1 request (k8s.io/api/admission/v1 AdmissionRequest)."""
    rt = attrs.type
    options_kind = "CreateOptions" if attrs.operation == "CREATE" else "UpdateOptions"
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "resource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
        "requestKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "requestResource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
        "name": attrs.name,
        "namespace": attrs.namespace,
        "operation": attrs.operation,
        "userInfo": {"username": attrs.user, "groups": ["system:authenticated"]},
        "object": attrs.obj,
        "oldObject": attrs.old,
        "dryRun": attrs.dry_run,
        "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"},
    }
    if attrs.subresource:
        request["subResource"] = request["requestSubResource"] = attrs.subresource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _denied(name: str, status: dict | None) -> ApiError:
    status = status or {}
    denied = f'admission webhook "{name}" denied the request'
    if status.get("message"):
        message = f"{denied}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied}: {status['reason']}"
    else:
        message = f"{denied} without explanation"
    code = int(status.get("code") or 0)
    return ApiError(max(code, 400), status.get("reason", ""), message, status.get("details"))


def _failed(name: str, why: str) -> ApiError:
    return ApiError(500, "InternalError", f'Internal error occurred: failed calling webhook '
                    f'"{name}": failed to call webhook: {why}',
                    {"causes": [{"message": f'failed calling webhook "{name}": failed to call '
                                            f"webhook: {why}"}]})


async def _ask(hook: dict, attrs: Attributes,
               services: dict[tuple[str, str], tuple[str, int]],
               clients: WebhookClients) -> dict:
    """One webhook's verdict applied: the object it returns (patched or as it was)."""
    name = hook.get("name", "")
    if attrs.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
        raise ApiError(400, "BadRequest",
                       f'admission webhook "{name}" has side effects and does not support '
                       "dry run")
    try:
        response = await call(hook, review_for(attrs), services, clients)
    except CallFailed as exc:
        if hook.get("failurePolicy", "Fail") == "Ignore":
            return attrs.obj
        raise _failed(name, str(exc)) from None
    if not response.get("allowed"):
        raise _denied(name, response.get("status"))
    if not response.get("patch"):
        return attrs.obj
    try:
        if response.get("patchType") != "JSONPatch":
            raise PatchError(f'unsupported patch type "{response.get("patchType")}"')
        return json_patch(attrs.obj, kube_json.loads(base64.b64decode(response["patch"])))
    except (PatchError, ValueError, TypeError) as exc:
        if hook.get("failurePolicy", "Fail") == "Ignore":
            return attrs.obj
        raise _failed(name, f"the patch it answered does not apply: {exc}") from None


async def admit(attrs: Attributes, configurations: list[dict],
                namespace_labels: Callable[[str], dict | None],
                services: dict[tuple[str, str], tuple[str, int]],
                clients: WebhookClients) -> dict:
    """The object after every matching mutating webhook (on the server's event loop, which
    serves other requests while a call waits, never under the store's lock: a webhook may
    call the API itself)."""
    labels = namespace_labels(attrs.namespace) if attrs.type.namespaced and attrs.namespace \
        else None
    hooks = [hook for config in sorted(configurations, key=lambda c: c["metadata"]["name"])
             for hook in config.get("webhooks") or []]
    obj = attrs.obj
    called: list[tuple[int, dict]] = []  # (index, object it returned) of IfNeeded webhooks
    for index, hook in enumerate(hooks):
        current = Attributes(**{**attrs.__dict__, "obj": obj})
        if not matches(hook, current, lambda: labels):
            continue
        obj = await _ask(hook, current, services, clients)
        if hook.get("reinvocationPolicy") == "IfNeeded":
            called.append((index, obj))
    for index, returned in called:  # reinvoked once when a later webhook changed it
        if obj != returned:
            obj = await _ask(hooks[index], Attributes(**{**attrs.__dict__, "obj": obj}),
                             services, clients)
    return obj
