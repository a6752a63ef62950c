"""`fluxnode exec`: run a command on a set of ranks and show what they say, like flux-exec(1).

The command goes to the broker this client is connected to as one ``rexec.exec`` request;
the brokers fan it out down the tree and stream every rank's output, exit and failures
back (see `fluxnode.agent.broker.exec_service`). This side only prints: stdout and stderr
as they come (each rank's in order; with ``--label-io`` line by line, prefixed ``RANK: ``),
one ``Error:`` line per rank that could not run it (unreachable or lost ones by rank and
host name), and at the end flux-exec's summary of non-zero exits. It credits the broker
with what it has written, so output never arrives faster than this process can write it.

Stdin is read by a thread (a blocking read never stalls the signals or the output) and
forwarded one chunk at a time: the next chunk goes once every process took the last.
SIGINT and SIGTERM are forwarded to every process; a second Ctrl-C within a second sends
SIGKILL. The exit status is the largest exit code (a signal N counts 128+N, a command not
found 127, not permitted 126, a rank that cannot be reached 68 as EX_NOHOST).
"""

from __future__ import annotations

import errno
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

import click

from fluxnode.agent.broker.client import Client, RPCError
from fluxnode.agent.broker.exec_process import decode_data, encode_data
from fluxnode.agent.broker.message import NODEID_ANY
from fluxnode.broker_conf import idset
from fluxnode.commands.common import connect, connection_options, key_value_pairs, rpc_errstr

WINDOW = 1 << 20  # bytes of output the broker may send ahead of what we wrote
POLL = 0.05  # seconds between looks at signals and stdin while output is quiet
INTERRUPT_WINDOW = 1.0  # a second Ctrl-C within this many seconds kills
KILL_GRACE = 5.0  # seconds to wait for the exits after SIGKILL before giving up
STDIN_CHUNK = 64 * 1024
EX_NOHOST = 68

PROG = "fluxnode-exec"


def failure_code(errnum: int) -> int:
    """flux-exec's exit codes for a process that did not start."""
    if errnum in (errno.EPERM, errno.EACCES):
        return 126
    if errnum == errno.ENOENT:
        return 127
    if errnum == errno.EHOSTUNREACH:
        return EX_NOHOST
    return 1


@dataclass
class Outcome:
    """What each rank did, for the exit status and the summary."""

    codes: dict[int, int] = field(default_factory=dict)  # rank -> exit code (128+N: signal N)
    texts: dict[int, str] = field(default_factory=dict)  # rank -> "Exit 2", "Killed", ...

    def exited(self, rank: int, event: dict) -> None:
        if "signal" in event:
            signum = int(event["signal"])
            self.codes[rank] = 128 + signum
            self.texts[rank] = signal.strsignal(signum) or f"Signal {signum}"
        else:
            code = int(event.get("status", 0))
            self.codes[rank] = code
            if code:
                self.texts[rank] = f"Exit {code}"

    def failed(self, rank: int, errnum: int) -> None:
        self.codes[rank] = failure_code(errnum)

    @property
    def code(self) -> int:
        return max(self.codes.values(), default=0)

    def summary(self) -> list[str]:
        by_text: dict[str, list[int]] = {}
        for rank, text in sorted(self.texts.items()):
            by_text.setdefault(text, []).append(rank)
        return [f"{idset.encode(ranks, brackets=True)}: {text}" for text, ranks in by_text.items()]


class ExecRun:
    """One `fluxnode exec`: the request, the output loop, signals and stdin."""

    def __init__(self, client: Client, argv: list[str], payload: dict, *, label_io: bool,
                 verbose: bool, forward_stdin: bool) -> None:
        self.client = client
        self.argv = argv
        self.payload = payload
        self.label_io = label_io
        self.verbose = verbose
        self.forward_stdin = forward_stdin
        self.t0 = time.monotonic()
        self.sid: str | None = None
        self.hostnames: dict[int, str] = {}
        self.outcome = Outcome()
        self.running: set[int] = set()
        self.uncredited = 0
        self.control_tags: list[int] = []
        self.partial: dict[tuple[int, str], bytes] = {}
        self.signals: list[int] = []
        self.last_sigint: float | None = None
        self.kill_deadline: float | None = None
        self.stdin_queue: queue.Queue[bytes] = queue.Queue(maxsize=1)
        self.write_tag: int | None = None
        self.stdin_done = not forward_stdin

    # -- output --------------------------------------------------------------------------
    def say(self, text: str) -> None:
        print(f"{PROG}: {text}", file=sys.stderr, flush=True)

    def vsay(self, text: str) -> None:
        if self.verbose:
            self.say(f"{time.monotonic() - self.t0:.3f}s: {text}")

    def who(self, rank: int) -> str:
        return f"rank {rank} ({self.hostnames.get(rank, '?')})"

    def write(self, rank: int, stream: str, data: bytes) -> None:
        out = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
        if not self.label_io:
            out.write(data)
            out.flush()
            return
        key = (rank, stream)
        data = self.partial.pop(key, b"") + data
        lines = data.split(b"\n")
        if lines[-1]:
            self.partial[key] = lines[-1]
        label = f"{rank}: ".encode()
        out.write(b"".join(label + line + b"\n" for line in lines[:-1]))
        out.flush()

    def flush_partial(self, rank: int) -> None:
        for stream in ("stdout", "stderr"):
            rest = self.partial.pop((rank, stream), None)
            if rest:
                out = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
                out.write(f"{rank}: ".encode() + rest + b"\n")
                out.flush()

    def event(self, ev: dict) -> None:
        rank, kind = ev.get("rank"), ev.get("type")
        if not isinstance(rank, int):
            return
        if kind == "output":
            self.write(rank, str(ev.get("stream")), decode_data(ev))
            self.uncredited += len(ev.get("data", ""))
        elif kind == "started":
            self.vsay(f"{self.who(rank)}: started, pid {ev.get('pid')}")
        elif kind == "exit":
            self.flush_partial(rank)
            self.running.discard(rank)
            self.outcome.exited(rank, ev)
            self.vsay(f"{self.who(rank)}: exited, code {self.outcome.codes[rank]}")
        elif kind == "failed":
            self.flush_partial(rank)
            self.running.discard(rank)
            errnum = int(ev.get("errnum", errno.EIO))
            self.outcome.failed(rank, errnum)
            self.say(f"Error: {self.who(rank)}: {self.argv[0]}: {ev.get('errstr')}")

    # -- control to the broker -----------------------------------------------------------
    def control(self, topic: str, payload: dict) -> int:
        tag = self.client.send(topic, {"id": self.sid, **payload}, NODEID_ANY)
        self.control_tags.append(tag)
        return tag

    def reap_control(self) -> None:
        """Collect the answers to credits and kills (their errors do not matter: a session
        that ended no longer needs either)."""
        for tag in list(self.control_tags):
            try:
                self.client.recv(tag, timeout=0)
            except RPCError as exc:
                if exc.errnum == errno.ETIMEDOUT:
                    continue
                raise
            self.control_tags.remove(tag)

    def credit(self) -> None:
        if self.uncredited >= WINDOW // 2:
            self.control("rexec.credit", {"bytes": self.uncredited})
            self.uncredited = 0

    # -- signals and stdin ---------------------------------------------------------------
    def on_signal(self, signum: int, _frame: object) -> None:
        self.signals.append(signum)

    def handle_signals(self) -> None:
        while self.signals and self.sid is not None:
            signum = self.signals.pop(0)
            now = time.monotonic()
            if signum == signal.SIGINT and self.last_sigint is not None \
                    and now - self.last_sigint < INTERRUPT_WINDOW:
                self.say(f"{idset.encode(self.running, brackets=True)}: killing (SIGKILL) "
                         "after a second interrupt")
                self.control("rexec.kill", {"signal": signal.SIGKILL})
                self.kill_deadline = now + KILL_GRACE
                self.last_sigint = None
                continue
            self.vsay(f"sending signal {signum} to {len(self.running)} running processes")
            self.control("rexec.kill", {"signal": signum})
            if signum == signal.SIGINT:
                self.last_sigint = now
                self.say(f"interrupt (Ctrl+C) one more time within {INTERRUPT_WINDOW:.2f} sec "
                         "to kill")

    def read_stdin(self) -> None:
        """The stdin thread: chunks into the queue (which holds one), then b"" at the end."""
        try:
            while True:
                chunk = os.read(0, STDIN_CHUNK)
                self.stdin_queue.put(chunk)
                if not chunk:
                    return
        except OSError:
            self.stdin_queue.put(b"")

    def pump_stdin(self) -> None:
        if self.stdin_done or self.sid is None:
            return
        if self.write_tag is not None:
            try:
                self.client.recv(self.write_tag, timeout=0)
            except RPCError as exc:
                if exc.errnum == errno.ETIMEDOUT:
                    return
                raise
            self.write_tag = None
        try:
            chunk = self.stdin_queue.get_nowait()
        except queue.Empty:
            return
        eof = not chunk
        self.stdin_done = eof
        self.write_tag = self.client.send(
            "rexec.write", {"id": self.sid, **encode_data(chunk), "eof": eof}, NODEID_ANY)

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> int:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self.on_signal)
        command = " ".join(self.argv)
        tag = self.client.send("rexec.exec", self.payload, NODEID_ANY)
        if self.forward_stdin:
            threading.Thread(target=self.read_stdin, name="stdin", daemon=True).start()
        while True:
            self.handle_signals()
            self.pump_stdin()
            if self.kill_deadline is not None and time.monotonic() > self.kill_deadline:
                self.say(f"{idset.encode(self.running, brackets=True)}: command still running "
                         "at exit")
                return 1
            try:
                msg = self.client.recv(tag, timeout=POLL)
            except RPCError as exc:
                if exc.errnum == errno.ETIMEDOUT:
                    continue
                self.say(f"lost the broker: {rpc_errstr(exc)}")
                return 1
            if msg.errnum:
                self.say(msg.errstr or os.strerror(msg.errnum))
                return EX_NOHOST if msg.errnum == errno.EHOSTUNREACH else 1
            payload = msg.decode_payload() or {}
            if self.sid is None:
                self.sid = str(payload.get("id"))
                self.hostnames = {int(r): h for r, h in payload.get("hostnames", {}).items()}
                self.running = set(self.hostnames)
                self.vsay(f"Starting {command} on {payload.get('ranks')}")
            for ev in payload.get("events", []):
                self.event(ev)
            self.credit()
            self.reap_control()
            if payload.get("end"):
                break
        self.vsay(f"{len(self.outcome.codes)} tasks complete with code {self.outcome.code}")
        for line in self.outcome.summary():
            print(line, file=sys.stderr, flush=True)
        return self.outcome.code


def _environment(settings: tuple[str, ...]) -> dict[str, str]:
    """The caller's environment with `-e VAR=VAL` settings on top (flux exec's default)."""
    return dict(os.environ) | key_value_pairs(settings, "-e", "VAR=VAL")


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": False}
)
@click.option("-r", "--rank", "ranks", default="all", show_default=True, metavar="IDSET",
              help="target ranks (an idset, or all)")
@click.option("-x", "--exclude", metavar="IDSET", help="leave these ranks out")
@click.option("-l", "--label-io", is_flag=True, help="label lines of output with RANK: ")
@click.option("-d", "--dir", "directory", metavar="DIR",
              help="working directory of the processes (default: the current one; none: the "
                   "broker's)")
@click.option("-e", "--env", "env_settings", multiple=True, metavar="VAR=VAL",
              help="set VAR in the processes' environment (default: this one's)")
@click.option("-n", "--noinput", is_flag=True, help="do not forward stdin (it is /dev/null)")
@click.option("-v", "--verbose", is_flag=True, help="show each rank's start and exit")
@connection_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_command(ranks: str, exclude: str | None, label_io: bool, directory: str | None,
                 env_settings: tuple[str, ...], noinput: bool, verbose: bool, uri: str | None,
                 curve_cert: str | None, command: tuple[str, ...]) -> None:
    """Run a command on the nodes of the target ranks.

    COMMAND runs on every target rank's node as the broker's user; its output is shown here.

    The exit status is the largest of the processes' (a signal N counts as 128+N).
    """
    env = _environment(env_settings)
    if directory is None:
        try:
            directory = os.getcwd()
        except OSError as exc:
            raise click.ClickException(f"cannot read the current directory: {exc.strerror}; "
                                       "use --dir") from None
    cwd = None if directory == "none" else directory
    payload = {"cmd": {"argv": list(command), "env": env, "cwd": cwd}, "ranks": ranks,
               "exclude": exclude, "stdin": not noinput, "window": WINDOW, "verbose": verbose}
    client = connect(uri, curve_cert)
    with client:
        run = ExecRun(client, list(command), payload, label_io=label_io, verbose=verbose,
                      forward_stdin=not noinput)
        code = run.run()
    sys.stdout.flush()
    sys.exit(code)
