"""The scheduler service as a leader from before sched.alloc's batch `cancel` answers: a
batch carrying any field beside `requests` is refused whole (EINVAL, in that version's
words), nothing done; everything else is today's service. A real leader loads it as its
broker module (``broker.modules=support.sched_service_before_cancel``, the tests directory
on its PYTHONPATH), so a binder can be run against the older leader a rolling upgrade
leaves behind while the binder's Deployment has rolled first."""

from __future__ import annotations

import errno
from typing import Any

from fluxnode.agent.broker.message import ServiceError
from fluxnode.scheduler.service.module import SchedService

MODULE = "support.sched_service_before_cancel"


class ServiceBeforeBatchCancel(SchedService):
    def alloc(self, payload: dict) -> dict:
        if isinstance(payload, dict) and "requests" in payload:
            extra = sorted(set(payload) - {"requests"})
            if extra:  # that version's request.batch check, word for word
                raise ServiceError(errno.EINVAL,
                                   "requests: cannot be combined with " + ", ".join(extra))
        return super().alloc(payload)


def load(broker: Any) -> ServiceBeforeBatchCancel:
    """Broker module entry point."""
    return ServiceBeforeBatchCancel(broker)
