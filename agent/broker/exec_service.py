"""``rexec``: run a command on a set of ranks, down the tree (the service behind `fluxnode exec`).

flux-exec(1) sends one ``rexec`` request per rank from the client. Here the client sends one
``rexec.exec`` to its own broker, and the work travels down the TBON: a broker starts the
process for its own rank (if targeted) and sends one ``rexec.fanout`` to each child whose
subtree holds targets, naming only those ranks; each child does the same in its subtree.
So the leader sends one message per child subtree, never one per rank. A client whose
targets lie outside its broker's subtree has that broker forward the whole request to rank 0.

Output comes back up the same edges as a stream of responses (RFC 6 streaming): each
response carries a batch of events (``started``, ``output``, ``exit``, ``failed``), and the
last one ``end``. Why windows: every edge has one, in bytes of output data. A sender may have
at most `window` bytes sent and not yet credited back; the receiver credits them
(``rexec.credit``) only once it has passed them on itself (to its own parent, or, for the
client, to its stdout). A broker thus holds at most one window per child subtree plus one
for its own process (`LocalProcess` stops reading the pipe), whatever the tree below
writes: a slow reader at the top slows the process at the bottom instead of bloating the
brokers in between (``rexec.stats``: ``buffered``, ``buffered_max``).

Events of one rank travel one path and every queue is FIFO, so a rank's output stays in
order and its exit follows its last byte. Stdin (``rexec.write``) goes down the tree the
same way and is answered once every process in the subtree took it (or cannot any more),
so the client never has more than one chunk in flight; signals (``rexec.kill``) likewise.

A rank that cannot be reached (its subtree's root is not connected, or becomes lost while
the command runs) is reported as a ``failed`` event naming it and its host. No process runs
on with nobody to read it: those of a local client that disconnects are killed, and so are
those a parent asked for when this broker has to join that parent again (it restarted).

Who may exec: only clients the broker already trusts (its local socket's owner, holders of
the instance's CURVE certificate), and only when ``[exec] allow = true`` (EPERM otherwise,
naming the switch); see SECURITY.md.
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fluxnode.agent.broker.boot import InstanceState
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.connector import LocalConnector, is_client_hop
from fluxnode.agent.broker.exec_process import (
    CommandSpec,
    LocalProcess,
    cost,
    decode_data,
    spawn_error,
)
from fluxnode.agent.broker.fanout import SubtreeSplit, target_ranks
from fluxnode.agent.broker.message import Message, MessageError, ServiceError
from fluxnode.agent.broker.overlay import Overlay
from fluxnode.agent.broker.reactor import Reactor
from fluxnode.agent.broker.routing import Router
from fluxnode.agent.broker.services import DEFERRED, ServiceRegistry
from fluxnode.broker_conf import idset

DEFAULT_WINDOW = 1 << 20  # bytes of output in flight per edge
MIN_WINDOW, MAX_WINDOW = 4096, 64 << 20
MESSAGE_DATA = 256 * 1024  # output data per upstream response
CLIENT_CHECK = 0.5  # seconds between checks that an entry session's local client is there
MAX_ARGS = 4096
MAX_STDIN_CHUNK = 1 << 20


@dataclass
class Link:
    """A `rexec.fanout` this broker sent: to a child for the targets in its subtree (or, from
    an entry broker, to rank 0 for all of them)."""

    nodeid: int
    ranks: set[int]  # targets behind it that have not reported an exit or failure yet
    remote_id: str
    matchtag: int = 0
    uncredited: int = 0  # bytes it sent that we passed on but have not credited back yet
    done: bool = False
    write_waiters: list[Callable[[], None]] = field(default_factory=list)


@dataclass
class Session:
    """One exec as this broker takes part in it."""

    id: str
    request: Message  # answered with the stream
    window: int
    credit: int  # bytes of output we may still send upstream
    verbose: bool
    stdin: bool = True  # False: the processes' stdin is /dev/null (`fluxnode exec -n`)
    queue: deque = field(default_factory=deque)  # (event, source: LocalProcess | Link | None)
    local: LocalProcess | None = None
    links: list[Link] = field(default_factory=list)
    buffered: int = 0
    flush_scheduled: bool = False
    ended: bool = False
    orphaned: bool = False  # its client went away: output is dropped

    @property
    def client_hop(self) -> str | None:
        hop = self.request.route[-1] if self.request.route else ""
        return hop if is_client_hop(hop) else None

    def finished(self) -> bool:
        local_done = self.local is None or self.local.done
        return local_done and all(link.done for link in self.links)


class ExecService:
    def __init__(self, state: InstanceState, router: Router, overlay: Overlay,
                 connector: LocalConnector, reactor: Reactor, log: BrokerLog) -> None:
        self.state = state
        self.router = router
        self.overlay = overlay
        self.connector = connector
        self.reactor = reactor
        self.log = log
        self.sessions: dict[str, Session] = {}
        self._ids = itertools.count(1)
        self.buffered = 0  # output bytes held in all sessions' queues now
        self.buffered_max = 0  # ... and at most, since the broker started
        self.sent: Counter[str] = Counter()  # requests and stream responses this broker sent
        self.received: Counter[str] = Counter()
        self._checking = False
        self.split = SubtreeSplit(state)
        self._joined_before = False

    def register(self, services: ServiceRegistry) -> None:
        services.register("rexec.exec", self._exec)
        services.register("rexec.fanout", self._fanout)
        services.register("rexec.credit", self._credit)
        services.register("rexec.write", self._write)
        services.register("rexec.kill", self._kill)
        services.register("rexec.stats", self._stats)

    # -- who may ---------------------------------------------------------------------------
    def _allowed(self) -> bool:
        return self.state.config.exec.allow

    def _refusal(self) -> str:
        where = self.state.config.path or "broker.toml"
        return (f"exec is disabled on {self.state.hostname} (rank {self.state.rank}): "
                f"[exec] allow = false in {where}")

    # -- starting --------------------------------------------------------------------------
    def _exec(self, msg: Message) -> object:
        """A client's request: pick the targets, then fan out (or forward to rank 0)."""
        self.received["rexec.exec"] += 1
        if not self._allowed():
            raise ServiceError(errno.EPERM, f"rexec.exec: {self._refusal()}")
        p = msg.payload or {}
        spec = _command(p.get("cmd"))
        targets = target_ranks(p.get("ranks", "all"), self.state.size, "rexec.exec",
                               exclude=p.get("exclude"))
        session = self._new_session(f"e{self.state.rank}.{next(self._ids)}", msg, p)
        hostnames = self.state.hostnames
        self._respond(session, {"id": session.id, "ranks": idset.encode(targets),
                                "hostnames": {str(r): hostnames[r] for r in sorted(targets)}})
        if targets <= self.split.subtree(self.state.rank):
            self._fan_out(session, targets, spec, p)
        else:
            self._open_link(session, 0, targets, f"u{self.state.rank}.{session.id[1:]}", spec, p)
        self._watch_clients()
        self._schedule(session)
        return DEFERRED

    def _fanout(self, msg: Message) -> object:
        """A parent's request for the targets in this broker's subtree."""
        self.received["rexec.fanout"] += 1
        p = msg.payload or {}
        sid = p.get("id")
        if not isinstance(sid, str) or not sid:
            raise ServiceError(errno.EPROTO, "rexec.fanout: id must be a non-empty string")
        if sid in self.sessions:
            raise ServiceError(errno.EEXIST, f"rexec.fanout: session {sid} exists already")
        spec = _command(p.get("cmd"))
        ranks = p.get("ranks")
        try:
            targets = set(idset.decode(ranks, limit=self.state.size)) if isinstance(ranks, str) \
                else None
        except ValueError as exc:
            raise ServiceError(errno.EPROTO, f"rexec.fanout: ranks: {exc}") from None
        if not targets:
            raise ServiceError(errno.EPROTO, "rexec.fanout: ranks must be a non-empty idset")
        session = self._new_session(sid, msg, p)
        self._respond(session, {"id": sid})
        mine = self.split.subtree(self.state.rank)
        self._fail(session, targets - mine, errno.EHOSTUNREACH,
                   f"not in the subtree of rank {self.state.rank}")
        self._fan_out(session, targets & mine, spec, p)
        self._schedule(session)
        return DEFERRED

    def _new_session(self, sid: str, msg: Message, p: dict) -> Session:
        window = p.get("window", DEFAULT_WINDOW)
        if not isinstance(window, int) or not MIN_WINDOW <= window <= MAX_WINDOW:
            raise ServiceError(errno.EINVAL, f"{msg.topic}: window must be an integer from "
                               f"{MIN_WINDOW} to {MAX_WINDOW}")
        session = Session(sid, msg, window, window, bool(p.get("verbose")),
                          bool(p.get("stdin", True)))
        self.sessions[sid] = session
        return session

    def _fan_out(self, session: Session, targets: set[int], spec: CommandSpec, p: dict) -> None:
        rank = self.state.rank
        if rank in targets:
            self._start_local(session, spec)
        for child, sub in self.split.by_child(targets):
            self._open_link(session, child, set(sub), session.id, spec, p)

    def _start_local(self, session: Session, spec: CommandSpec) -> None:
        rank = self.state.rank
        if not self._allowed():
            self._fail(session, {rank}, errno.EPERM, self._refusal())
            return
        env = dict(spec.env)
        env["FLUXNODE_URI"] = self.state.attrs["local-uri"]  # this broker, as flux sets FLUX_URI
        local = LocalProcess(
            self.reactor, rank, CommandSpec(spec.argv, env, spec.cwd),
            with_stdin=session.stdin, window=session.window,
            sink=lambda ev: self._enqueue(session, ev, local),
            on_done=lambda: self._schedule(session))
        try:
            local.start()
        except OSError as exc:
            errnum, text = spawn_error(exc, spec.argv[0])
            self._fail(session, {rank}, errnum, text)
            return
        session.local = local
        if session.verbose:
            self._enqueue(session, {"rank": rank, "type": "started", "pid": local.pid}, None)

    def _open_link(self, session: Session, nodeid: int, ranks: set[int], remote_id: str,
                   spec: CommandSpec, p: dict) -> None:
        link = Link(nodeid, set(ranks), remote_id)
        child = self.overlay.children.get(nodeid)
        if child is not None and not child.connected:
            self._fail(session, ranks, errno.EHOSTUNREACH,
                       f"unreachable: {child.hostname} (rank {nodeid}) is {child.status}")
            return
        session.links.append(link)
        payload = {"id": remote_id, "ranks": idset.encode(ranks),
                   "cmd": {"argv": spec.argv, "env": spec.env, "cwd": spec.cwd},
                   "stdin": session.stdin, "window": session.window,
                   "verbose": session.verbose}
        self.sent["rexec.fanout"] += 1
        link.matchtag = self.router.request(
            Message.request("rexec.fanout", payload, nodeid=nodeid),
            lambda m: self._from_link(session, link, m), stream=True)

    # -- events coming in ------------------------------------------------------------------
    def _from_link(self, session: Session, link: Link, msg: Message) -> None:
        if link.done:
            return
        if msg.errnum:
            self._link_failed(session, link, msg.errnum, msg.errstr or "failed")
            return
        try:
            payload = msg.decode_payload() or {}
        except MessageError as exc:
            self._link_failed(session, link, exc.errnum, exc.errstr)
            return
        events = payload.get("events", [])
        for ev in events if isinstance(events, list) else []:
            if not isinstance(ev, dict) or not isinstance(ev.get("rank"), int):
                continue
            if ev.get("type") in ("exit", "failed"):
                link.ranks.discard(ev["rank"])
            self._enqueue(session, ev, link)
        if payload.get("end"):
            link.done = True
            self.router.forget(link.matchtag)
            if link.ranks:
                self._fail(session, link.ranks, errno.EIO, "ended without reporting an exit")
                link.ranks = set()
            self._release_writes(link)
        self._schedule(session)

    def _link_failed(self, session: Session, link: Link, errnum: int, errstr: str) -> None:
        link.done = True
        self.router.forget(link.matchtag)
        self._fail(session, link.ranks, errnum, errstr)
        link.ranks = set()
        self._release_writes(link)
        self._schedule(session)

    def _fail(self, session: Session, ranks: set[int] | frozenset[int], errnum: int,
              errstr: str) -> None:
        for r in sorted(ranks):
            self._enqueue(session, {"rank": r, "type": "failed", "errnum": errnum,
                                    "errstr": errstr, "hostname": self.state.hostnames[r]}, None)

    def _enqueue(self, session: Session, event: dict, source: LocalProcess | Link | None) -> None:
        n = cost(event)
        session.queue.append((event, source))
        session.buffered += n
        self.buffered += n
        self.buffered_max = max(self.buffered_max, self.buffered)
        self._schedule(session)

    def overlay_changed(self) -> None:
        """A child joined or was lost: a lost one's ranks will not answer any more."""
        for session in list(self.sessions.values()):
            for link in session.links:
                child = self.overlay.children.get(link.nodeid)
                if not link.done and child is not None and not child.connected:
                    self._link_failed(session, link, errno.EHOSTUNREACH,
                                      f"lost: {child.hostname} (rank {link.nodeid}) is "
                                      f"{child.status}")

    def parent_rejoined(self) -> None:
        """This broker joined its parent again (the parent restarted, or reset us): nobody
        above waits for a session the parent asked for before, and a link that went up the
        tree (to rank 0) will not be answered. Kill the processes of the first, as for a
        client that went away, so that none runs on with nobody to read it; fail the second."""
        if not self._joined_before:
            self._joined_before = True  # the first join: nothing came from the parent yet
            return
        hop = self.overlay.parent_hop
        for session in list(self.sessions.values()):
            route = session.request.route
            if not session.orphaned and route and route[-1] == hop:
                self._orphan(session, "parent")
                continue
            for link in session.links:
                if not link.done and link.nodeid not in self.overlay.children:
                    self._link_failed(session, link, errno.EHOSTUNREACH,
                                      "lost: the path to rank 0 was reset")

    # -- events going out ------------------------------------------------------------------
    def _schedule(self, session: Session) -> None:
        if not session.flush_scheduled and not session.ended:
            session.flush_scheduled = True
            self.reactor.call_later(0, lambda: self._flush(session))

    def _flush(self, session: Session) -> None:
        session.flush_scheduled = False
        if session.ended:
            return
        queue = session.queue
        while True:
            batch: list[dict] = []
            size = 0
            while queue and size < MESSAGE_DATA:
                event, source = queue[0]
                n = cost(event)
                if n and session.credit <= 0 and not session.orphaned:
                    break
                queue.popleft()
                if not session.orphaned:
                    batch.append(event)
                    session.credit -= n
                size += n
                session.buffered -= n
                self.buffered -= n
                if source is not None and n:
                    self._passed_on(session, source, n)
            end = not queue and session.finished()
            if session.orphaned:
                if end:
                    self._end(session)
                return
            if batch or end:
                payload: dict = {"events": batch}
                if end:
                    payload["end"] = True
                self._respond(session, payload)
            if end:
                self._end(session)
                return
            if not batch or not queue or (session.credit <= 0 and cost(queue[0][0])):
                return

    def _passed_on(self, session: Session, source: LocalProcess | Link, n: int) -> None:
        if isinstance(source, LocalProcess):
            source.release(n)
            return
        source.uncredited += n
        if not source.done and source.uncredited >= session.window // 2:
            self.sent["rexec.credit"] += 1
            self.router.request(Message.request(
                "rexec.credit", {"id": source.remote_id, "bytes": source.uncredited},
                nodeid=source.nodeid))
            source.uncredited = 0

    def _respond(self, session: Session, payload: dict) -> None:
        self.sent["responses"] += 1
        self.router.respond(session.request.response(payload))

    def _end(self, session: Session) -> None:
        session.ended = True
        self.sessions.pop(session.id, None)
        self.buffered -= session.buffered
        session.buffered = 0

    # -- control from upstream -------------------------------------------------------------
    def _session(self, msg: Message) -> Session:
        sid = (msg.payload or {}).get("id")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            raise ServiceError(errno.ENOENT, f"{msg.topic}: no exec session {sid!r}")
        return session

    def _credit(self, msg: Message) -> dict:
        self.received["rexec.credit"] += 1
        session = self._session(msg)
        n = (msg.payload or {}).get("bytes")
        if not isinstance(n, int) or not 0 < n <= MAX_WINDOW:
            raise ServiceError(errno.EINVAL, f"rexec.credit: bytes must be 1..{MAX_WINDOW}")
        session.credit = min(session.credit + n, session.window)
        self._schedule(session)
        return {}

    def _kill(self, msg: Message) -> dict:
        self.received["rexec.kill"] += 1
        session = self._session(msg)
        signum = (msg.payload or {}).get("signal")
        if not isinstance(signum, int) or not 0 < signum < 65:
            raise ServiceError(errno.EINVAL, "rexec.kill: signal must be a signal number")
        self._signal(session, signum)
        return {}

    def _signal(self, session: Session, signum: int) -> None:
        if session.local is not None:
            session.local.kill(signum)
        for link in session.links:
            if not link.done:
                self.sent["rexec.kill"] += 1
                self.router.request(Message.request(
                    "rexec.kill", {"id": link.remote_id, "signal": signum}, nodeid=link.nodeid))

    def _write(self, msg: Message) -> object:
        """Stdin for every process of the session; answered once all of them took it."""
        self.received["rexec.write"] += 1
        session = self._session(msg)
        p = msg.payload or {}
        eof = bool(p.get("eof"))
        try:
            data = decode_data(p) if "data" in p else b""
        except (ValueError, TypeError, AttributeError) as exc:
            raise ServiceError(errno.EPROTO, f"rexec.write: data: {exc}") from None
        if len(data) > MAX_STDIN_CHUNK:
            raise ServiceError(errno.E2BIG, f"rexec.write: more than {MAX_STDIN_CHUNK} bytes")
        waiting = [0]

        def one_done() -> None:
            waiting[0] -= 1
            if waiting[0] == 0:
                self.router.respond(msg.response({}))

        waiting[0] += 1  # held until every part below is asked
        if session.local is not None and not session.local.done:
            waiting[0] += 1
            session.local.write(data, eof, one_done)
        for link in session.links:
            if link.done:
                continue
            waiting[0] += 1
            link.write_waiters.append(one_done)
            forward = {k: v for k, v in p.items() if k != "id"}
            self.sent["rexec.write"] += 1
            self.router.request(
                Message.request("rexec.write", {**forward, "id": link.remote_id},
                                nodeid=link.nodeid),
                lambda _m, link=link, done=one_done: self._write_acked(link, done))
        one_done()
        return DEFERRED

    def _write_acked(self, link: Link, done: Callable[[], None]) -> None:
        if done in link.write_waiters:
            link.write_waiters.remove(done)
            done()

    def _release_writes(self, link: Link) -> None:
        waiters, link.write_waiters = link.write_waiters, []
        for done in waiters:
            done()

    def _stats(self, msg: Message) -> dict:
        """Sessions, output bytes held now and at most (``{"reset": true}`` starts the
        maximum afresh), and the messages sent and received by topic."""
        if (msg.payload or {}).get("reset"):
            self.buffered_max = self.buffered
        return {"sessions": len(self.sessions), "buffered": self.buffered,
                "buffered_max": self.buffered_max, "window": DEFAULT_WINDOW,
                "sent": dict(self.sent), "received": dict(self.received)}

    # -- clients that go away ----------------------------------------------------------------
    def _watch_clients(self) -> None:
        if not self._checking:
            self._checking = True
            self.reactor.call_later(CLIENT_CHECK, self._check_clients)

    def _check_clients(self) -> None:
        self._checking = False
        watching = False
        for session in list(self.sessions.values()):
            hop = session.client_hop
            if hop is None or session.orphaned:
                continue
            if hop not in self.connector.clients:
                self._orphan(session, "client")
            else:
                watching = True
        if watching:
            self._watch_clients()

    def _orphan(self, session: Session, who: str) -> None:
        """Nobody reads `session` any more (its client went away, or the parent that asked
        for it restarted): kill its processes; what still comes back is dropped."""
        self.log.info("rexec: %s of %s went away; killing its processes", who, session.id)
        session.orphaned = True
        self._signal(session, signal.SIGKILL)
        self._schedule(session)

    def close(self) -> None:
        for session in self.sessions.values():
            if session.local is not None:
                session.local.close()
        self.sessions.clear()


def _command(cmd: object) -> CommandSpec:
    if not isinstance(cmd, dict):
        raise ServiceError(errno.EPROTO, "rexec: cmd must be an object {argv, env, cwd}")
    argv, env, cwd = cmd.get("argv"), cmd.get("env", {}), cmd.get("cwd")
    if not isinstance(argv, list) or not argv or len(argv) > MAX_ARGS or \
            not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise ServiceError(errno.EPROTO, "rexec: cmd.argv must be a non-empty list of strings")
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and "=" not in k
            and "\0" not in k + v for k, v in env.items()):
        raise ServiceError(errno.EPROTO, "rexec: cmd.env must map names to strings")
    if cwd is not None and (not isinstance(cwd, str) or not cwd or "\0" in cwd):
        raise ServiceError(errno.EPROTO, "rexec: cmd.cwd must be a path or null")
    return CommandSpec(list(argv), dict(env), cwd if cwd is None else os.fspath(cwd))
