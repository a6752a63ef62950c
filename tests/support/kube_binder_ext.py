"""Emulator behaviour the binder relies on that the shared emulator does not have (yet).

The real API server copies a Binding's ``metadata.annotations`` onto the pod
when it sets ``spec.nodeName`` (pkg/registry/core/pod/storage: setPodHostAndAnnotations),
so a scheduler annotates and binds in one request. This store does the same;
the annotations land in the same locked section just before the bind, so no
watcher ever sees the pod bound without them.
"""

from __future__ import annotations

from support.kube_emulator import KubeEmulator
from support.kube_store import DEFAULT_NAMESPACES, KubeStore


class AnnotatingBindStore(KubeStore):
    def bind(self, namespace: str | None, pod_name: str, binding: dict) -> dict:
        annotations = ((binding or {}).get("metadata") or {}).get("annotations") if isinstance(binding, dict) else None
        with self.lock:
            if annotations:
                old = self.get("pods", namespace or "default", pod_name)
                if not old.get("spec", {}).get("nodeName") and not old["metadata"].get("deletionTimestamp"):
                    self.patch("pods", namespace or "default", pod_name, {"metadata": {"annotations": annotations}}, "merge")
            return super().bind(namespace, pod_name, binding)


class BinderKubeEmulator(KubeEmulator):
    def __init__(self, *, namespaces: tuple[str, ...] = DEFAULT_NAMESPACES, **kw):
        super().__init__(namespaces=namespaces, **kw)
        self.store = AnnotatingBindStore(namespaces)
