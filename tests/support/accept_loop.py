"""A listening socket served on a thread of its own: each connection it accepts is counted
and handed to `handle` on a thread of its own; the loop ends when the socket is closed.
The test servers (the scripted HTTP server, the proxy tests' echo server) share it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class AcceptLoop:
    def __init__(self, sock: socket.socket, handle: Callable[[socket.socket], None]):
        self.sock, self.handle = sock, handle
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
