"""Run under `fluxnode proxy`: open N connections to $FLUXNODE_URI, echo SIZE random bytes on
each."""

import os
import socket
import sys
import threading

n, size = int(sys.argv[1]), int(sys.argv[2])
path = os.environ["FLUXNODE_URI"].removeprefix("local://")
errors = []


def one(i: int) -> None:
    payload = os.urandom(size)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)

        def send() -> None:  # concurrently with reading, so large payloads cannot deadlock
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        got = bytearray()
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        sender.join()
    if bytes(got) != payload:
        errors.append(
            f"connection {i}: sent {len(payload)} bytes, got {len(got)} back "
            f"(equal={bytes(got) == payload})"
        )


threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("\n".join(errors) if errors else f"ok {n}x{size} via {os.environ['FLUXNODE_URI']}")
sys.exit(1 if errors else 0)
