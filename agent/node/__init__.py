"""The Kubernetes node agent: one per node (the DaemonSet), it keeps this node's broker.

`agent` is the reconcile loop: `selection` picks the nodes that belong in the overlay,
`ranks` keeps the rank map (a ConfigMap), `overlay_config` renders broker.toml,
`secret` keeps the CURVE certificate, `host_files` writes them on the host, and
`supervisor` runs the broker process; `resources`, `events`, `metrics` report.
"""
