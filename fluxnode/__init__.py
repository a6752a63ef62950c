"""fluxnode: a Flux-style overlay of Python brokers and a Fluxion-style graph scheduler for
Kubernetes."""

__version__ = "0.1.0"
