"""`python -m fluxnode broker ...` read without click, for the broker process itself.

A broker lives as long as its node and every node runs one, so what it imports is paid
thousands of times over: click (with inspect, uuid, platform and datetime behind it) is
about 2 MiB of a broker's memory and 100 ms of its start. `fluxnode/__main__.py` hands the
arguments of `broker` here first; when they are exactly the forms `fluxnode broker`
documents (`--config-path/-c PATH`, `--setattr/-S ATTR=VALUE`, `--hostname NAME`, each
also as `--opt=value`) and the attributes parse, the broker runs without click. Anything
else (`--help`, an unknown or missing option, a bad attribute) returns None and the click
command answers it, so its messages and exit codes stay the only ones.

broker.toml is read before the broker's own modules are imported, and the modules the
read brought in (`tomllib` with `datetime` and `string`) are dropped once it is done:
the broker's imports then reuse their memory (0.15 MiB of a lone worker's RSS, issue 32),
and a later `config.reload` imports them again. When the config cannot be read, the
broker reads it again and says why, as it always has.
"""

from __future__ import annotations

import gc
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fluxnode.broker_conf.config import BrokerConfig

_LONG = {"--config-path": "config_path", "--setattr": "settings", "--hostname": "hostname"}
_SHORT = {"-c": "config_path", "-S": "settings"}


@dataclass
class BrokerArgs:
    """The options of `fluxnode broker`, as click would have passed them."""

    config_path: str = ""
    settings: list[str] = field(default_factory=list)
    hostname: str | None = None


def parse(argv: list[str]) -> BrokerArgs | None:
    """The arguments after `broker`, or None when click should read them."""
    args = BrokerArgs()
    i = 0
    while i < len(argv):
        word = word_name = argv[i]
        value: str | None = None
        if word.startswith("--") and "=" in word:
            word_name, value = word.split("=", 1)
        name = _LONG.get(word_name) or (_SHORT.get(word) if value is None else None)
        if name is None:
            return None
        if value is None:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        if name == "settings":
            args.settings.append(value)
        else:
            setattr(args, name, value)
    return args if args.config_path else None


def run(argv: list[str]) -> int | None:
    """Run the broker when `argv` is plain; None when click should handle it."""
    from fluxnode.agent.broker import attributes

    args = parse(argv)
    if args is None:
        return None
    try:
        attrs = attributes.parse_settings(args.settings)
    except attributes.AttrError:
        return None  # click's usage error says it
    config = _read_config(args.config_path)
    from fluxnode.agent.broker import broker

    return broker.main(args.config_path, attrs, args.hostname, config=config)


def _read_config(path: str) -> BrokerConfig | None:
    """broker.toml, or None when it cannot be read; the modules the read imported are
    taken out of `sys.modules` again and collected (see above)."""
    from fluxnode.broker_conf import config

    before = set(sys.modules)
    try:
        return config.load(path)
    except (ValueError, OSError):
        return None
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]
        gc.collect()
