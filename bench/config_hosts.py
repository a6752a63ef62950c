"""How long a broker's host lookups take in a rendered broker.toml of N hosts.

BrokerConfig.hosts is resolved once per loaded config; before, every rank_of /
bind_uri / connect_uri re-expanded all hostlists. Prints the one-time resolution
cost (what each lookup used to cost) and the per-call cost now.

    .venv/bin/python bench/config_hosts.py [N ...]
"""

from __future__ import annotations

import argparse
import timeit

from fluxnode.broker_conf import config, render
from fluxnode.broker_conf.config import _resolve_hosts


def measure(n: int) -> tuple[float, float, float]:
    """Seconds per call: resolve all hosts, connect_uri(last), rank_of(last host)."""
    hosts = [f"node{i}" for i in range(n)]
    cfg = config.loads(render.render_broker_toml(hosts, curve_cert="/c", port=8050))
    resolve = (
        min(
            timeit.repeat(
                lambda: _resolve_hosts(cfg.bootstrap.hosts, cfg.path), number=20, repeat=3
            )
        )
        / 20
    )
    connect = min(timeit.repeat(lambda: cfg.connect_uri(n - 1), number=2000, repeat=3)) / 2000
    rank_of = min(timeit.repeat(lambda: cfg.rank_of(hosts[-1]), number=500, repeat=3)) / 500
    return resolve, connect, rank_of


def main(sizes: list[int]) -> None:
    print(
        f"{'hosts':>6} {'resolve (old per-call cost)':>28} {'connect_uri now':>16} "
        f"{'rank_of(last) now':>18}"
    )
    for n in sizes:
        resolve, connect, rank_of = measure(n)
        print(
            f"{n:>6} {resolve * 1e3:>25.3f} ms {connect * 1e6:>13.2f} us {rank_of * 1e6:>15.1f} us"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sizes", nargs="*", type=int, default=[16, 256, 1024], metavar="N",
                        help="host counts (default: 16 256 1024)")
    main(parser.parse_args().sizes)
