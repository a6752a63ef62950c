"""Where the broker's log lines go: stderr at `log-stderr-level`, and everything to `log-filename`.

The line (``TIME host broker[rank]: LEVEL message``) and its sinks are `broker_log`'s; this
reads them from the broker's attributes.
"""

from __future__ import annotations

from fluxnode.agent.broker import attributes
from fluxnode.agent.broker.broker_log import BrokerLog


def setup_logging(rank: int, hostname: str, attrs: dict[str, str]) -> BrokerLog:
    level = attributes.stderr_level(attrs.get("log-stderr-level", "6"))
    return BrokerLog(f"{hostname} broker[{rank}]: ", level,
                     log_file=attrs.get("log-filename") or None)
