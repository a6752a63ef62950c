"""Bounded exponential backoff: the one retry delay of the node agent and the informers.

Two callers, one rule (client-go's and the kubelet's): start at ``initial``,
multiply by ``factor`` per failure up to ``maximum``, and start over after
``reset`` (a success, or a broker that stayed up long enough). Many informers
retrying one API server at once spread out with jitter (each delay drawn from
[d/2, d]); a single supervised process restarting after a crash does not need it,
and its delays are then exact (what the kubelet's CrashLoopBackOff shows too).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial: float = 0.05
    maximum: float = 5.0
    factor: float = 2.0
    jitter: bool = True
    _current: float = field(default=0.0, repr=False)

    def next_delay(self) -> float:
        """Seconds to wait before the next try."""
        self._current = (
            self.initial if self._current == 0 else min(self.maximum, self._current * self.factor)
        )
        return random.uniform(self._current / 2, self._current) if self.jitter else self._current

    def reset(self) -> None:
        self._current = 0.0
