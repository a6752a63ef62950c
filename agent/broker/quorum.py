"""The leader's view of who is online, and the quorum that moves the instance to "run".

As in flux-core's state_machine.c, the instance is in state ``quorum`` until
`broker.quorum` brokers are online (all, unless set), and ``run`` from then on; the
leader logs every change of the online set as a hostlist and an idset, which is what
an operator reads to see brokers come and go. Other brokers report their own view
(`broker.status`) but only the leader keeps the log.
"""

from __future__ import annotations

from fluxnode.agent.broker.boot import InstanceState
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.message import Message
from fluxnode.agent.broker.overlay import Overlay
from fluxnode.broker_conf import hostlist, idset


class Quorum:
    def __init__(self, state: InstanceState, overlay: Overlay, log: BrokerLog) -> None:
        self.state = state
        self.overlay = overlay
        self.log = log
        self.reached = False
        self._last_online: list[int] = []

    def online_changed(self) -> bool:
        """On the leader: log a new online set and the quorum; True if the set changed."""
        online = sorted(self.overlay.online)
        if online == self._last_online:
            return False
        self._last_online = online
        self.log.info(
            "online: %s (ranks %s)",
            hostlist.encode(self.state.hostnames[r] for r in online),
            idset.encode(online),
        )
        if not self.reached and len(online) >= self.state.quorum:
            self.reached = True
            self.log.info("quorum reached")
        return True

    def forget_online(self) -> None:
        """After ``config.reload``: log the online set again, against the new size."""
        self._last_online = []

    def down_ranks(self) -> list[int]:
        return [r for r in range(self.state.size) if r not in self.overlay.online]

    def status(self, msg: Message) -> dict:
        """The `broker.status` service."""
        online = sorted(self.overlay.online)
        return {
            "rank": self.state.rank,
            "size": self.state.size,
            "online": idset.encode(online),
            "count": len(online),
            "quorum": self.state.quorum,
            "state": "run" if self.reached else "quorum",
        }
