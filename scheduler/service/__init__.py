"""The leader's scheduler service: a broker module (``broker.modules`` names this package).

`load` is the module entry point every broker module offers; the service's handlers
live in `module`, the payload checks in `request`, the allocation record in `allocation`,
its live graph in `live_graph` (built by `flat_graph`, slot kinds made into request trees
and cut into slots by `slot_kinds`, refusals in `errors`) and its write-ahead log in
`journal`.
"""

from fluxnode.scheduler.service.module import load

__all__ = ["load"]
