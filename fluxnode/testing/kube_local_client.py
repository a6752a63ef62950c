"""Requests of the emulator's own controllers, handled by its API server in process.

A real kube-controller-manager reaches the API server over HTTPS; the emulated controllers
(kube_job_controller) run in the emulator's process, where that hop was most of their CPU
and a third of the server's per request (the TLS records, the HTTP parsing on both sides,
urllib3's and http.client's header handling: bench/workloads.py, about 0.7 ms per pod
create in all). What a request means is untouched: it is the same method, path, headers
and JSON bytes, given to the same handler (`KubeEmulator._handle`) on the server's event
loop, so it is authenticated by its bearer token, authorized as its identity, counted in
``requests``, admitted (webhooks over HTTPS), validated and stored exactly as a request
from a socket would be. Only the transport is left out; the answer is the handler's
status and JSON body, parsed anew (the caller never shares an object with the store).

`LocalRequest` carries what the handler reads of an aiohttp request (method, path, query,
headers, body); a watch needs a connection and is not offered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDictProxy
from yarl import URL

from fluxnode.testing import kube_json

# the longest a controller waits for the server's answer (the official client's timeout
# in the controller was 30 s too)
TIMEOUT = 30.0


@dataclass
class LocalRequest:
    """The parts of an aiohttp request the emulator's handler reads."""

    method: str
    path_qs: str
    headers: CIMultiDictProxy[str]
    body: bytes = b""
    transport: None = None  # no connection: the handler's watch needs one (not offered)
    _url: URL = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._url = URL(self.path_qs)

    @property
    def path(self) -> str:
        return self._url.path

    @property
    def query(self) -> MultiDictProxy[str]:
        return self._url.query

    async def read(self) -> bytes:
        return self.body


class LocalApiError(Exception):
    """An answer of 400 or more: its status and the Status body (JSON text)."""

    def __init__(self, status: int, body: str):
        super().__init__(f"({status}) {body}")
        self.status, self.body = status, body


class LocalClient:
    """JSON requests to the emulator's handler as the identity of `token`, from any thread
    but the server's own (each waits for the server's loop to answer it)."""

    def __init__(self, handle: Callable[[Any], Awaitable[web.StreamResponse]],
                 loop: asyncio.AbstractEventLoop, token: str, user_agent: str):
        self._handle, self._loop = handle, loop
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json",
                         "User-Agent": user_agent}

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> dict:
        """One request; the answer's JSON body ({} when empty). LocalApiError for a status
        of 400 or more."""
        request = self._request(method, path, body, content_type)
        response = asyncio.run_coroutine_threadsafe(self._handle(request), self._loop).result(
            TIMEOUT)
        answer = self._answer(response)
        if isinstance(answer, LocalApiError):
            raise answer
        return answer

    def request_batches(self, batches: list[list[tuple[str, str, Any]]],
                        content_type: str = "application/json") -> list[dict | LocalApiError]:
        """Batches of requests (method, path, body), one after the other, each batch's
        requests sent at once, as a client's parallel requests are (handled as `request`
        handles one, all of them concurrently on the server's loop); a batch with a failed
        request is the last one sent. One hop to the loop and back for all of them (a hop
        per request, then per batch, woke two threads each: bench/workloads.py). The
        answers of the requests sent, in order, a LocalApiError for each status of 400 or
        more; an exception of the handler itself is raised."""
        local = [[self._request(m, p, b, content_type) for m, p, b in batch]
                 for batch in batches]

        async def handle_all() -> list[Any]:
            out: list[Any] = []
            for batch in local:
                answers = await asyncio.gather(*(self._handle(r) for r in batch),
                                               return_exceptions=True)
                out += answers
                if any(isinstance(a, BaseException) or a.status >= 400 for a in answers):
                    break
            return out

        responses = asyncio.run_coroutine_threadsafe(handle_all(), self._loop).result(TIMEOUT)
        failed = next((r for r in responses if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        return [self._answer(r) for r in responses]

    def _request(self, method: str, path: str, body: Any, content_type: str) -> LocalRequest:
        headers = CIMultiDictProxy(CIMultiDict({**self._headers, "Content-Type": content_type}))
        data = b"" if body is None else kube_json.dumps(body)
        request = LocalRequest(method, path, headers, data)
        if method == "GET" and request.query.get("watch") in ("true", "1"):
            raise ValueError("a watch needs a connection: not offered in process")
        return request

    @staticmethod
    def _answer(response: web.StreamResponse) -> dict | LocalApiError:
        """The JSON body of a handler's response, or a LocalApiError for a status of 400
        or more."""
        assert isinstance(response, web.Response)
        raw = response.body or b""
        assert isinstance(raw, bytes)
        if response.status >= 400:
            return LocalApiError(response.status, raw.decode())
        return kube_json.loads(raw) if raw else {}
