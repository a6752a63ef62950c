"""A tiny broker module exercising BrokerHandle (loaded by tests via broker.modules)."""

from __future__ import annotations

import errno

from fluxnode.agent.broker.message import ServiceError
from fluxnode.broker_conf import idset


class TestModule:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.changes: list[dict] = []
        broker.register("testmod.info", self.info)
        broker.register("testmod.publish", self.publish)
        broker.register("testmod.fail", self.fail)
        broker.register("sched.resource-status", self.resource_status)
        broker.on_resources_changed(self.changed)

    def changed(self, R: dict, down: list[int]) -> None:
        self.changes.append({"nnodes": len(R["execution"]["R_lite"]) and sum(
            len(_ids(e["rank"])) for e in R["execution"]["R_lite"]), "down": down})

    def info(self, msg) -> dict:
        return {"rank": self.broker.rank, "size": self.broker.size, "statedir": str(self.broker.statedir),
                "down": self.broker.down_ranks(), "changes": self.changes[-3:],
                "nnodes": sum(len(_ids(e["rank"])) for e in self.broker.resources()["execution"]["R_lite"]),
                "attr_rank": self.broker.attrs["rank"]}

    def publish(self, msg) -> dict:
        self.broker.publish(msg.payload["topic"], msg.payload.get("payload"))
        return {}

    def fail(self, msg) -> dict:
        raise ServiceError(errno.EPERM, "testmod says no")

    def resource_status(self, msg) -> dict:
        # rank 1: cores 0-1 allocated
        return {"allocated": {"1": {"cores": "0-1", "gpus": ""}}}


def _ids(s: str) -> list[int]:
    return idset.decode(s)


def load(broker) -> TestModule:
    return TestModule(broker)
