"""The binder: places pods and pod groups through the lead broker, as kube-scheduler would.

`binder` wires the parts: the `cluster_state` cache fed by informers, the queue and
`scheduling_cycle` (ask the leader for a placement, all or nothing per group), the
`binding_cycle` (bind workers), and `reconcile` (rebuild from the leader after a
restart or a takeover); `context` is what those parts share.
"""
