"""The API emulator's JSON codec: every body it reads and every answer and watch event it
writes, in orjson (a compiled codec; docs/dependencies.md says what it saved).

One place decides how the emulator's JSON is made, so the server, its in-process client
(kube_local_client) and its admission calls (kube_admission) agree:

- `dumps` gives UTF-8 bytes, compact, in the objects' own key order; non-string keys are
  written as strings, as the standard library's encoder does (a YAML body may carry them);
- `loads` refuses what Go's decoder refuses too (NaN, a byte order mark, lone surrogates)
  with a ValueError, as the standard library's decoder does for malformed text;
- `response` is an aiohttp answer of `dumps`' bytes, without aiohttp's own encoder (which
  would go through a str first).

Messages that quote a value as Go prints it (kube_crd_schema, kube_tables) keep the
standard library's encoder: their spacing is part of the text.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

_OPTIONS = orjson.OPT_NON_STR_KEYS


def dumps(obj: Any) -> bytes:
    """`obj` as compact JSON bytes."""
    return orjson.dumps(obj, option=_OPTIONS)


def loads(raw: bytes | str) -> Any:
    """The JSON value of `raw`; ValueError (orjson.JSONDecodeError) when it is not JSON."""
    return orjson.loads(raw)


def response(obj: Any, status: int = 200) -> web.Response:
    """An ``application/json`` answer holding `obj`."""
    return web.Response(body=dumps(obj), status=status, content_type="application/json")
