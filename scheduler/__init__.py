"""Graph scheduler in the manner of Fluxion, and the Kubernetes binder (installed as ``fluxnode.scheduler``)."""
