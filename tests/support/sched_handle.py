"""The BrokerHandle surface the scheduler service uses, for driving `SchedService` directly
in tests (R grows or changes, ranks go down) without a broker."""

from __future__ import annotations

import logging


class SchedHandle:
    def __init__(self, statedir, R, size: int = 1):
        self.rank, self.size, self.attrs = 0, size, {}
        self.statedir, self.log = statedir, logging.getLogger("test.sched")
        self.R = R
        self.handlers = {}

    def register(self, topic, handler):
        self.handlers[topic] = handler

    def resources(self):
        return self.R

    def down_ranks(self):
        return []

    def expected_ranks(self):
        return list(range(self.size))

    def on_resources_changed(self, callback):
        pass
