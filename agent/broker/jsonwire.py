"""Compact JSON for message headers and payloads, with the C encoder and scanner made once.

Every message a broker forwards has its header parsed and written again, so the setup
the json module repeats per call weighed on each hop (issue 32, ping parity with Flux):
`json.dumps(..., separators=...)` builds a JSONEncoder, whose `encode` builds a closure
and a C encoder per call; `json.loads` sniffs the encoding and `JSONDecoder.decode` runs
two whitespace regexes around the C scanner. Here the C encoder and scanner are built at
import and called directly; the text written and the values read are json.dumps's and
json.loads's (the property tests hold them to it). The encoder keeps no set of objects
being encoded (json.dumps's check_circular): a value that contains itself fails with
RecursionError instead of ValueError; no message can hold one (payloads come from JSON
or are built fresh by a handler).
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
from typing import Any

_default = json.JSONEncoder().default  # TypeError: "Object of type X is not JSON serializable"
_WHITESPACE = json.decoder.WHITESPACE

if json.encoder.c_make_encoder is not None:
    _c_encoder = json.encoder.c_make_encoder(
        None, _default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)

    def encode(value: Any) -> str:
        """json.dumps(value, separators=(",", ":"))"""
        return "".join(_c_encoder(value, 0))
else:  # an interpreter without the _json accelerator
    encode = json.JSONEncoder(separators=(",", ":")).encode

# A JSON string literal of `text` as json.dumps writes it (ASCII, escaped), one C call: what
# message.py writes a header's strings with (TypeError for anything but a str).
quote = json.encoder.encode_basestring_ascii

_scan = json.scanner.make_scanner(json.JSONDecoder())


def decode(text: str) -> Any:
    """json.loads(text) for text that does not begin with whitespace or a BOM."""
    try:
        value, end = _scan(text, 0)
    except StopIteration as err:
        raise json.JSONDecodeError("Expecting value", text, err.value) from None
    if end != len(text):
        end = _WHITESPACE.match(text, end).end()
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
    return value
