"""Issue 32: a broker that is not the leader loads no scheduler, no YAML, no Kubernetes
client and no click (nor OpenSSL's libcrypto or SQLite, which only the leader's stores
use), nor the node agent's and binder's `logging` set-up, nor `logging` itself, nor
what `inspect` imports. The
oracle is the interpreter's own report, `python -X importtime`, of a worker broker started
alone as the node agent starts it (`python -m fluxnode broker`)."""

from __future__ import annotations

from fluxnode.agent.broker.client import Client

from fluxnode.testing.lone_broker import leader_and_worker, lone_worker

FORBIDDEN = ("fluxnode.scheduler", "yaml", "kubernetes", "click", "networkx", "jinja2",
             "_hashlib", "sqlite3", "_sqlite3",
             # nor, until it is sent an archive, the archive format and its extraction
             "fluxnode.agent.broker.archive_format", "fluxnode.agent.broker.archive_extract",
             # nor the daemons' `logging` set-up: a broker writes its own lines (broker_log)
             "fluxnode.agent.logs",
             # nor the logging package at all: the broker's lines are broker_log's, and the
             # level numbers it needs are there too (0.4 MiB of a lone worker's RSS)
             "logging",
             # nor pyzmq's sugar: the broker calls libzmq through pyzmq's compiled backend
             # alone (agent/broker/zmq_core.py; 1.1 MiB of RSS, and pickle, random, json's
             # pure-Python half, platform come with it)
             "zmq.sugar", "zmq.utils.jsonapi", "pickle", "platform",
             # nor what `inspect` imports: `dataclasses` imports it only to write a
             # signature as the docstring of a class without one; the broker's command
             # defers it (agent/broker/deferred.py) and every dataclass it runs has a
             # docstring (0.95 MiB of RSS)
             "ast", "dis", "tokenize",
             # nor, until it is asked for a `rexec.*` service, the exec service and its
             # processes (0.4 MiB of RSS)
             "fluxnode.agent.broker.exec_service", "fluxnode.agent.broker.exec_process",
             # nor, until it is asked for a `content.*` or `archive.*` service, the content
             # store and the archive service
             "fluxnode.agent.broker.content_store", "fluxnode.agent.broker.archive_service",
             # nor the `socket` module's Python layer (its enums, `selectors`, `array`):
             # the broker's sockets are `_socket`'s (0.25 MiB of RSS)
             "socket", "selectors",
             # nor the `signal` module's Python layer (its enum wrappers): the broker's
             # signal calls are `_signal`'s
             "signal")


def imported(report: str) -> list[str]:
    """Module names from `-X importtime` lines: `import time: self | cumulative | name`."""
    return [line.split("|")[2].strip() for line in report.splitlines()
            if line.startswith("import time:") and line.count("|") == 2]


def test_a_worker_broker_imports_none_of_the_leaders_or_the_cli_libraries(tmp_path):
    err = tmp_path / "importtime.txt"
    with open(err, "wb") as f, lone_worker(tmp_path / "w", ("-X", "importtime"), stderr=f):
        pass  # it answered a ping: every module it serves with is loaded
    modules = imported(err.read_text())
    assert "zmq.constants" in modules and "fluxnode.agent.broker.broker" in modules, \
        modules[:20]
    loaded = sorted({m for m in modules for f in FORBIDDEN if m == f or m.startswith(f + ".")})
    assert loaded == [], f"a worker broker imported {loaded}"


def test_a_worker_starts_its_services_with_their_first_requests(tmp_path):
    """The exec service and the content store a worker holds by their topics alone answer
    their first requests as they always did (a fresh exec service: no sessions, nothing
    buffered, the 1 MiB window of `fluxnode exec`'s flow control; a content cache that holds
    nothing, of a broker that was sent no blob), and their modules are imported then, not
    before."""
    err = tmp_path / "importtime.txt"
    with open(err, "wb") as f, lone_worker(tmp_path / "w", ("-X", "importtime"),
                                           stderr=f) as (_proc, uri):
        before = imported(err.read_text())
        with Client.connect(uri, timeout=10.0) as c:
            stats = c.rpc("rexec.stats", {}, nodeid=1, timeout=10.0)
            content = c.rpc("content.stats-get", {}, nodeid=1, timeout=10.0)
    after = imported(err.read_text())
    for module in ("exec_service", "content_store", "archive_service"):
        assert f"fluxnode.agent.broker.{module}" not in before
        assert f"fluxnode.agent.broker.{module}" in after
    assert {k: stats[k] for k in ("sessions", "buffered", "buffered_max", "window")} == \
        {"sessions": 0, "buffered": 0, "buffered_max": 0, "window": 1 << 20}
    assert (content["count"], content["bytes"], content["fetches"]) == (0, 0, 0)


def test_brokers_exchanging_messages_over_the_tbon_load_no_sugar(tmp_path):
    """What a broker loads once messages cross the overlay (rank 0's ROUTER, its ZAP
    handler and socket monitor, rank 1's DEALER, frames received into zmq.Frame objects):
    still no pyzmq sugar. Both ranks are processes of their own, not forked from a launcher
    that may have loaded it."""
    reports = (tmp_path / "rank0.txt", tmp_path / "rank1.txt")
    with open(reports[0], "wb") as f0, open(reports[1], "wb") as f1, \
            leader_and_worker(tmp_path / "pair", ("-X", "importtime"), stderr=(f0, f1)):
        pass  # rank 1 answered a ping sent through rank 0
    for rank, report in enumerate(reports):
        modules = imported(report.read_text())
        assert "fluxnode.agent.broker.zmq_core" in modules, (rank, modules[:20])
        sugar = sorted(m for m in modules if m == "zmq.sugar" or m.startswith("zmq.sugar."))
        assert sugar == [], f"rank {rank} imported {sugar}"
