#!/usr/bin/env python3
"""Ping latency to the leader while each hostile input of issue 11 is sent to it.

A 2-broker instance with the scheduler service; for each input a thread pings rank 0 back
to back over its own connection while another client sends the input (repeatedly, for
--seconds), and the table gives the pings' p50 / p99 / worst and how the input was
answered. Target: p99 under 50 ms on a quiet machine.

    .venv/bin/python bench/hostile.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import threading
import time

import yaml
from fluxnode.agent.broker.client import Client, RPCError
from fluxnode.agent.broker.message import Message, encode_stream
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec

from fluxnode.testing.instance import Instance
from fluxnode.testing.ping_probe import PingProbe
from fluxnode.testing.waiting import wait_for

MiB = 1 << 20


def stats(probe: PingProbe) -> tuple[float, float, float, int]:
    """p50, p99 and worst ping (ms), and how many."""
    return probe.p50 * 1000, probe.p99 * 1000, probe.worst * 1000, len(probe.latencies)


def alias_bomb() -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def with_ranks(ranks: str) -> dict:
    return build_jobspec([SlotKind(1, 0, 0, 1)], constraints={"ranks": [ranks]})


def rpc_inputs(inst: Instance) -> dict[str, tuple[str, dict | None]]:
    alloc = inst.rpc("sched.alloc", {"jobspec": build_jobspec([SlotKind(1, 0, 0, 1)])})
    return {
        "jobspec [ x 30000": ("sched.alloc", {"jobspec": "[" * 30000 + "]" * 30000}),
        "jobspec alias bomb": ("sched.alloc", {"jobspec": alias_bomb()}),
        "constraint ranks 0-16777215": ("sched.alloc", {"jobspec": with_ranks("0-16777215")}),
        "cancel ranks 0-16777215": ("sched.cancel", {"id": alloc["id"], "ranks": "0-16777215"}),
        "duration .inf": ("sched.alloc", {"jobspec": yaml.safe_dump(
            {**build_jobspec([SlotKind(1, 0, 0, 1)]), "attributes": {"system": {
                "duration": float("inf")}}})}),
    }


def send_rpc(uri: str, topic: str, payload: dict | None, raw: bytes | None) -> str:
    if raw is not None:  # a frame the client library would not build (too deep to encode)
        s = socket.socket(socket.AF_UNIX)
        s.connect(uri.removeprefix("local://"))
        s.sendall(raw)
        s.settimeout(30)
        head = s.recv(4)
        s.close()
        return "answered" if len(head) == 4 else "hung up"
    try:
        with Client.connect(uri, timeout=30) as c:
            c.rpc(topic, payload)
        return "accepted"
    except RPCError as exc:
        return f"errno {exc.errnum}"


def deep_frame(depth: int) -> bytes:
    header = json.dumps({"type": "request", "topic": "sched.list", "nodeid": 0,
                         "matchtag": 1}).encode()
    payload = b"[" * depth + b"]" * depth
    return encode_stream([b"FLUXNODE1", header, payload])


def stream_inputs(inst: Instance, stop: threading.Event) -> dict:
    path = inst.uri.removeprefix("local://")

    def partial_messages() -> str:
        socks = []
        for _ in range(6):
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.settimeout(2)
            try:
                s.sendall(struct.pack("!I", 60 * MiB) + b"x" * (48 * MiB))
            except OSError:
                pass
            socks.append(s)
        stop.wait()
        for s in socks:
            s.close()
        return "bounded"

    def unread_pings() -> str:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.settimeout(2)
        data = b"".join(encode_stream(Message.request(
            "broker.ping", {"pad": "y" * 65536}, matchtag=i + 1).to_frames()) for i in range(3000))
        try:
            s.sendall(data)
        except OSError:
            pass
        stop.wait()
        s.close()
        return "paused"

    def silent_tcp() -> str:
        host, port = inst.tcp_uri(0).removeprefix("tcp://").rsplit(":", 1)
        socks = [socket.create_connection((host, int(port))) for _ in range(200)]
        stop.wait()
        for s in socks:
            s.close()
        return "all but 16 shed at once (the admission guard), the rest after the handshake timeout"

    return {"6 clients x 48 MiB of a 60 MiB message": partial_messages,
            "3,000 x 64 KiB pings never read": unread_pings,
            "200 silent TCP connections to the TBON port": silent_tcp}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="how long each input is sent")
    args = ap.parse_args()
    rows = []
    with Instance(2, modules=None, resources={f"node{i}": {"cores": 4} for i in range(2)}) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 2, 30,
                 what="2 ranks")
        with PingProbe(inst.uri) as p:
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                time.sleep(0.05)
        rows.append(("(nothing: baseline)", *stats(p), ""))
        inputs = rpc_inputs(inst)
        inputs["payload nested 100,000 deep"] = ("sched.list", None)  # a raw frame
        for name, (topic, payload) in inputs.items():
            raw = deep_frame(100_000) if payload is None else None
            outcome, sent = "", 0
            with PingProbe(inst.uri) as p:
                deadline = time.monotonic() + args.seconds
                while time.monotonic() < deadline:
                    outcome = send_rpc(inst.uri, topic, payload, raw)
                    sent += 1
            rows.append((name, *stats(p), f"{outcome} (x{sent})"))
        for name, attack in stream_inputs(inst, stop := threading.Event()).items():
            stop.clear()
            result: list[str] = []
            t = threading.Thread(target=lambda a=attack, r=result: r.append(a()), daemon=True)
            with PingProbe(inst.uri) as p:
                t.start()
                deadline = time.monotonic() + args.seconds
                while time.monotonic() < deadline:
                    time.sleep(0.05)
                stop.set()
                t.join(60)
            rows.append((name, *stats(p), result[0] if result else "?"))
    print(f"{'input':48} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'pings':>7}  answer")
    for name, p50, p99, worst, n, outcome in rows:
        print(f"{name:48} {p50:8.2f} {p99:8.2f} {worst:8.2f} {n:7d}  {outcome}")


if __name__ == "__main__":
    main()
