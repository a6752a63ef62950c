"""Fixtures of the node-agent tests."""

from __future__ import annotations

import pytest
from support.kube_agents import AgentProcess, stop_all


@pytest.fixture
def agents(kube, tmp_path):
    """start(node, *agent_args): a `fluxnode agent` for that node; all stopped at the end."""
    started: list[AgentProcess] = []

    def start(node: str, *extra: str) -> AgentProcess:
        agent = AgentProcess(kube, node, tmp_path, *extra).start()
        started.append(agent)
        return agent

    yield start
    stop_all(started)
