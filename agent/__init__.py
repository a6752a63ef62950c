"""Node agent and broker daemon (installed as ``fluxnode.agent``)."""
