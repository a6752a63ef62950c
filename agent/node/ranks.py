"""Stable broker ranks, shared by every agent through one ConfigMap.

Why a ConfigMap: ranks must survive node churn (a node keeps its rank while it
exists), and every agent must render the same broker.toml. A pure function of the
current node list cannot do that (a deletion would renumber), so the map is state.
Agents update it with optimistic concurrency (PUT carrying the resourceVersion; on 409
re-read and re-plan), and the plan is deterministic, so concurrent agents converge.

Rules (``plan``): live nodes keep their rank; a departed node leaves a vacant slot
(shown down) that the next new node fills (its own old slot if it comes back, else the
lowest), else new nodes are appended in creation order; trailing vacant slots are dropped (the
overlay shrinks). Rank 0
hosts the leader and does not move while its node lives; if the leader's node goes
away, the highest-ranked live node takes rank 0 (the one exception, so there is
always a leader).

An agent writes only if its view of the nodes is at least as new as the view the
last writer recorded (``nodesResourceVersion``), so a lagging agent never undoes a
newer decision. To avoid a thundering herd of writers on every node change, one agent
is the designated writer (the lowest Ready rank); the others take over only when the
map has no Ready rank or a change stays unwritten for a grace period.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fluxnode.agent.kube.api_error import api_errors, denied, is_denied

log = logging.getLogger("fluxnode.agent.ranks")

DATA_KEY = "ranks.json"


@dataclass(frozen=True)
class RankMap:
    """``hosts[rank]`` is the node name; ranks in ``vacant`` belong to departed nodes."""

    hosts: tuple[str, ...] = ()
    vacant: frozenset[int] = field(default_factory=frozenset)
    nodes_resource_version: int = 0

    @property
    def size(self) -> int:
        return len(self.hosts)

    def rank_of(self, node: str) -> int | None:
        for rank, host in enumerate(self.hosts):
            if host == node and rank not in self.vacant:
                return rank
        return None

    def live(self) -> dict[str, int]:
        return {h: r for r, h in enumerate(self.hosts) if r not in self.vacant}

    def same_ranks(self, other: RankMap) -> bool:
        return self.hosts == other.hosts and self.vacant == other.vacant

    def to_json(self) -> str:
        return json.dumps({"hosts": list(self.hosts), "vacant": sorted(self.vacant),
                           "nodesResourceVersion": self.nodes_resource_version}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> RankMap:
        try:
            data = json.loads(text)
            hosts = tuple(str(h) for h in data["hosts"])
            vacant = frozenset(int(r) for r in data.get("vacant", []))
            rv = int(data.get("nodesResourceVersion", 0))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"rank map {DATA_KEY}: {exc}") from None
        if any(r < 0 or r >= len(hosts) for r in vacant):
            raise ValueError(f"rank map {DATA_KEY}: vacant rank out of range")
        live = [h for r, h in enumerate(hosts) if r not in vacant]
        if len(set(live)) != len(live) or not all(hosts):
            raise ValueError(f"rank map {DATA_KEY}: host names must be non-empty and distinct")
        return cls(hosts, vacant, rv)


def plan(current: RankMap, members: set[str], joinable: list[str], view_rv: int = 0) -> RankMap:
    """The next rank map (see module docstring); ``current`` when nothing changes."""
    hosts = list(current.hosts)
    vacant = set(current.vacant)
    for rank, host in enumerate(hosts):
        if rank not in vacant and host not in members:
            vacant.add(rank)
    live = {h for r, h in enumerate(hosts) if r not in vacant}
    newcomers = [n for n in joinable if n not in live]
    if hosts and 0 in vacant:
        movers = [r for r in range(len(hosts) - 1, 0, -1) if r not in vacant]
        if movers:
            r = movers[0]
            hosts[0], vacant = hosts[r], (vacant - {0}) | {r}
        elif newcomers:
            hosts[0], vacant = newcomers.pop(0), vacant - {0}
    # A node that comes back gets its old rank if that is still vacant; others take the lowest.
    returning = [n for n in newcomers if any(hosts[r] == n for r in vacant)]
    for node in returning + [n for n in newcomers if n not in returning]:
        own = sorted(r for r in vacant if hosts[r] == node)
        free = own or sorted(vacant)
        if free:
            hosts[free[0]] = node
            vacant.discard(free[0])
        else:
            hosts.append(node)
    while hosts and (len(hosts) - 1) in vacant:
        vacant.discard(len(hosts) - 1)
        hosts.pop()
    # broker.toml needs distinct hostnames: a vacancy named like a live node gets a placeholder.
    live_names = {h for r, h in enumerate(hosts) if r not in vacant}
    for r in sorted(vacant):
        if hosts[r] in live_names or hosts.count(hosts[r]) > 1:
            hosts[r] = f"vacant-{r}"
    result = RankMap(tuple(hosts), frozenset(vacant), max(view_rv, current.nodes_resource_version))
    return current if result.same_ranks(current) else result


class RankStore:
    """The ConfigMap holding the rank map (create-if-absent, update with resourceVersion)."""

    def __init__(self, api: Any, namespace: str, name: str):
        self.api, self.namespace, self.name = api, namespace, name
        self._last: dict | None = None

    def _where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def read(self) -> tuple[RankMap, dict | None]:
        """The stored map and the raw ConfigMap (None if it does not exist yet)."""
        try:
            resp = self.api.read_namespaced_config_map(
                self.name, self.namespace, _preload_content=False
            )
        except api_errors() as exc:
            if exc.status == 404:
                return RankMap(), None
            if is_denied(exc):
                raise denied(f"cannot read {self._where()}", exc) from None
            raise
        cm = json.loads(resp.data)
        return self.parse(cm), cm

    @staticmethod
    def parse(cm: dict) -> RankMap:
        text = (cm.get("data") or {}).get(DATA_KEY)
        return RankMap.from_json(text) if text else RankMap()

    def reconcile(
        self,
        members: set[str],
        joinable: list[str],
        view_rv: int,
        cached: dict | None,
        may_write: Callable[[RankMap, RankMap], bool],
        cache_rv: int = 0,
        attempts: int = 20,
    ) -> RankMap:
        """Apply ``plan`` to the stored map and write it back if it changed; returns the stored map.

        ``cached`` is the ConfigMap as the informer last saw it (None: not seen) as of
        ``cache_rv``, so a turn with nothing to change costs no API call; the API is read
        only after a conflict.
        ``may_write(stored, wanted)`` says whether this agent should be the one to write.
        """
        cm = self._newest(cached, cache_rv)
        for _ in range(attempts):
            current = self.parse(cm) if cm is not None else RankMap()
            if view_rv < current.nodes_resource_version:
                return current  # our node view is older than the last writer's: do not overrule it
            wanted = plan(current, members, joinable, view_rv)
            if cm is not None and wanted is current:
                return current
            if not may_write(current, wanted):
                return current
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": self.name, "namespace": self.namespace,
                                 "labels": {"app.kubernetes.io/name": "fluxnode",
                                            "app.kubernetes.io/component": "rank-map"}},
                    "data": {DATA_KEY: wanted.to_json()}}
            try:
                if cm is None:
                    resp = self.api.create_namespaced_config_map(
                        self.namespace, body, _preload_content=False
                    )
                else:
                    body["metadata"]["resourceVersion"] = cm["metadata"]["resourceVersion"]
                    resp = self.api.replace_namespaced_config_map(self.name, self.namespace, body,
                                                                  _preload_content=False)
            except api_errors() as exc:
                if exc.status == 409:  # someone else wrote first: re-read and re-plan
                    _, cm = self.read()
                    continue
                if exc.status == 404:  # deleted behind our back: create it afresh
                    self._last = cm = None
                    continue
                if is_denied(exc):
                    raise denied(f"cannot write {self._where()}", exc) from None
                raise
            self._last = json.loads(resp.data)
            log.info("rank map: %s", ", ".join(f"{r}={h}{' (vacant)' if r in wanted.vacant else ''}"
                                             for r, h in enumerate(wanted.hosts)) or "empty")
            return wanted
        raise RuntimeError(f"{self._where()}: gave up after {attempts} conflicting updates")

    def _newest(self, cached: dict | None, cache_rv: int) -> dict | None:
        """The newer of the informer's copy and the one we last wrote (the informer may lag).

        If the informer has seen past our write and no longer has the object, it was deleted.
        """
        last = self._last
        if last is None:
            return cached
        try:
            last_rv = int(last["metadata"]["resourceVersion"])
            seen_rv = int(cached["metadata"]["resourceVersion"]) if cached is not None else cache_rv
        except (KeyError, ValueError):
            return cached
        if last_rv > seen_rv:
            return last
        if cached is None:
            self._last = None
        return cached
