"""HTTP/1.1 answers parsed from bytes: fluxnode's one parser (`agent/kube/http1.py`) against h11.

Why: docs/dependencies.md ("One HTTP/1.1 answer parser, held against h11") says why the binder
and the API emulator's webhook client parse answers with a parser of our own rather than h11,
the kept sans-IO library. This is the measurement behind it: 64 pipelined answers of the
binder's kind (a Job's PATCH answer, Content-Length or chunked), fed 16 KiB at a time, parsed
`--reps` times.

Instructions do not move with the machine's load, so compare them under callgrind, at two
repetition counts so that start-up and imports cancel (per answer = (I(60) - I(20)) / (40 * 64)):

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p \
        .venv/bin/python bench/http_answers.py --parser ours --framing length --reps 20
    (then --reps 60, and --parser h11 after `pip install h11`)

Without valgrind, `--time` prints microseconds per answer (load-dependent).
"""

from __future__ import annotations

import argparse
import io
import json
import time

from fluxnode.agent.kube.http1 import ResponseParser

ANSWERS = 64  # pipelined on one connection
READ = 16384  # bytes handed to the parser at a time


def answer(framing: str) -> tuple[bytes, bytes]:
    """One API server answer (its usual headers) and its body, 3.4 KiB of JSON."""
    body = json.dumps({"kind": "Job", "metadata": {"name": "j", "labels": {
        f"k{i}": "v" * 40 for i in range(60)}}}).encode()
    head = (b"HTTP/1.1 200 OK\r\nAudit-Id: 5f0c2b8e-6e3a-4b71-9a47-0f0f3c4d2a11\r\n"
            b"Cache-Control: no-cache, private\r\nContent-Type: application/json\r\n"
            b"X-Kubernetes-Pf-Flowschema-Uid: 2b1e7a55-1f9e-4a3c-8d3a-6f1d1f2a8e01\r\n"
            b"X-Kubernetes-Pf-Prioritylevel-Uid: 8c3a7f7e-1b0d-4e52-9f0a-1c2d3e4f5a6b\r\n"
            b"Date: Sun, 29 Nov 2026 13:00:00 GMT\r\n")
    if framing == "length":
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body, body
    return (head + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(body) + body
            + b"\r\n0\r\n\r\n"), body


def ours(src: io.BytesIO) -> list[bytes]:
    parser, out = ResponseParser(), []
    for _ in range(ANSWERS):
        while (response := parser.next_response()) is None:
            parser.feed(src.read(READ))
        out.append(response.data)
    return out


def with_h11(src: io.BytesIO) -> list[bytes]:
    """h11 driven as a client must drive it: each request's Request and EndOfMessage sent
    through its state machine (their bytes dropped), then events to EndOfMessage and
    start_next_cycle (h11 does not pipeline otherwise)."""
    import h11  # optional: only for this comparison

    conn, out = h11.Connection(h11.CLIENT), []
    request = h11.Request(method="PATCH", target="/x", headers=[("Host", "h")])
    end = h11.EndOfMessage()
    for _ in range(ANSWERS):
        conn.send(request)
        conn.send(end)
        parts = []
        while type(event := conn.next_event()) is not h11.EndOfMessage:
            if event is h11.NEED_DATA:
                conn.receive_data(src.read(READ))
            elif type(event) is h11.Data:
                parts.append(event.data)
        out.append(b"".join(parts))
        conn.start_next_cycle()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parser", choices=("ours", "h11"), default="ours")
    parser.add_argument("--framing", choices=("length", "chunked"), default="length")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--time", action="store_true", help="print microseconds per answer")
    args = parser.parse_args()
    parse = {"ours": ours, "h11": with_h11}[args.parser]
    one, body = answer(args.framing)
    wire = one * ANSWERS
    if parse(io.BytesIO(wire)) != [body] * ANSWERS:  # the same bodies, or the count is void
        raise SystemExit(f"{args.parser} parsed the answers wrong")
    began = time.perf_counter()
    for _ in range(args.reps):
        parse(io.BytesIO(wire))
    if args.time:
        per = (time.perf_counter() - began) / (args.reps * ANSWERS) * 1e6
        print(f"{args.parser} {args.framing}: {per:.1f} us per answer")


if __name__ == "__main__":
    main()
