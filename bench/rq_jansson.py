"""readers/jansson_error.py against libjansson itself, on random malformed documents.

Fluxion's JGF reader words a document it cannot parse in jansson's terms (error text,
line, column); ``jansson_error`` follows jansson 2.14's ``load.c``. This draws random
documents from pieces that reach each rule (brackets, strings with escapes and
surrogates, numbers past int64 or a double, identifiers, invalid UTF-8, NUL bytes,
deep nesting) and compares its answer with ``json_loads(text, 0, &error)`` of the
installed libjansson (through ctypes), which Fluxion links:

    .venv/bin/python bench/rq_jansson.py --documents 20000 --seed 1

It prints the differences (none expected) and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import random
import sys

from fluxnode.scheduler.readers.jansson_error import jansson_error

PIECES = [b"{", b"}", b"[", b"]", b":", b",", b'"a"', b'"', b"1", b"-", b"0", b".", b"e",
          b"E", b"+", b"12345678901234567890", b"1e999", b"-1e999", b"1.5", b"true",
          b"tru", b"null", b"nul", b"x", b" ", b"\n", b"\t", b"\r", b"\\", b"\\u0000",
          b"\\ud800", b"\\udc00", b"\\u00e9", b'"\\u0000"', b"\xff", b"\xc3\xa9", b"\xc3",
          b"\xe2\x82", b"\xed\xa0\x80", b"@", b"\x01", b"NaN", b"Infinity", b"\x00",
          b'"abcdefghijklmnopqrstuvwxyz"', b'"\\n"', b'"\\q"', b"/", b"-0", b"00", b"01",
          b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808",
          b"-9223372036854775809"]


class JsonError(ctypes.Structure):
    """jansson.h's json_error_t."""

    _fields_ = [("line", ctypes.c_int), ("column", ctypes.c_int),
                ("position", ctypes.c_int), ("source", ctypes.c_char * 80),
                ("text", ctypes.c_char * 160)]


def libjansson():
    name = ctypes.util.find_library("jansson")
    if name is None:
        sys.exit("libjansson not found (apt-get install libjansson4)")
    lib = ctypes.CDLL(name)
    lib.json_loads.restype = ctypes.c_void_p
    lib.json_loads.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(JsonError)]
    lib.json_delete.argtypes = [ctypes.c_void_p]
    return lib


def real(lib, data: bytes) -> str | None:
    err = JsonError()
    value = lib.json_loads(data.split(b"\0")[0], 0, ctypes.byref(err))
    if value:
        return None  # accepted (the value is leaked: a bench run is short)
    text = err.text.decode("utf-8", "replace")
    return f"{text}: {err.source.decode()}@{err.line}:{err.column}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--documents", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    lib = libjansson()
    rng = random.Random(args.seed)
    differ = 0
    for _ in range(args.documents):
        data = b"".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.5:
            data = rng.choice([b"{", b"[", b'{"a":', b"[1,"]) + data
        mine, want = jansson_error(data), real(lib, data)
        if mine != want:
            differ += 1
            print(f"{data!r}\n  jansson_error: {mine}\n  libjansson:    {want}")
    for depth in (2048, 2049):
        data = b"[" * depth + b"]" * depth
        if jansson_error(data) != real(lib, data):
            differ += 1
            print(f"nesting {depth} differs")
    print(f"{differ} differences in {args.documents + 2} documents")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
