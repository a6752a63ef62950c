"""What jansson's ``json_loads(text, 0, &error)`` says of a document it refuses.

Fluxion's JGF reader (``resource_reader_jgf.cpp``'s ``fetch_jgf``) reports a document
that does not parse in jansson's words: ``error.text`` (the message and, where the
lexer had read some of the offending token, ``near 'TOKEN'``, else ``near end of
file``), then ``<string>@LINE:COLUMN``. Python's ``json`` words the same mistakes
otherwise, and accepts documents jansson refuses (``NaN``, ``1e999``, integers past
int64, ``\\u0000``, lone surrogates, a scalar at the top). :func:`jansson_error` runs
jansson 2.14's lexer and parser (``src/load.c``) over the bytes and returns its error
text, or None when jansson accepts them; :func:`loads` then reads them with
``json.loads`` (what jansson accepts, Python's ``json`` reads to the same values).

The rules kept from ``load.c``: a NUL byte ends the input (``string_get``); lines count
``\\n`` from 1, columns count UTF-8 characters from 0 on the line; a token's saved text
is named only when it is 20 bytes or shorter; the first error set is the one reported;
a byte that is no valid UTF-8 stops the lexer with "unable to decode byte 0x..".
Nesting deeper than 2048 is "maximum parsing depth reached". The parse is iterative, in
one pass over the bytes.
"""

from __future__ import annotations

import json

MAX_DEPTH = 2048  # JSON_PARSER_MAX_DEPTH
TEXT_LENGTH = 160  # JSON_ERROR_TEXT_LENGTH, with its NUL
INT64_MAX = 2**63 - 1
EOF, ERROR = -1, -2  # STREAM_STATE_EOF, STREAM_STATE_ERROR
T_INVALID, T_EOF, T_STRING, T_INT, T_REAL, T_TRUE, T_FALSE, T_NULL = (
    "invalid", "eof", "string", "integer", "real", "true", "false", "null")


class JanssonError(ValueError):
    """``json_loads`` refused the text; the message is jansson's (see jansson_error)."""


class _Error(Exception):
    """Carries the first error jansson sets (later ones are ignored there too)."""


def _utf8_len(b: int) -> int:
    """utf8_check_first: the length of the sequence byte ``b`` starts (0: none)."""
    if b <= 0x7F:
        return 1
    if b <= 0xBF or b in (0xC0, 0xC1):
        return 0
    if b <= 0xDF:
        return 2
    if b <= 0xEF:
        return 3
    return 4 if b <= 0xF4 else 0


def _utf8_full(seq: bytes) -> bool:
    """utf8_check_full: continuation bytes, no overlong form, no surrogate, <= 0x10FFFF."""
    n = len(seq)
    value = seq[0] & (0x1F if n == 2 else 0x0F if n == 3 else 0x07)
    for b in seq[1:]:
        if not 0x80 <= b <= 0xBF:
            return False
        value = (value << 6) | (b & 0x3F)
    if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
        return False
    return not (n == 2 and value < 0x80 or n == 3 and value < 0x800
                or n == 4 and value < 0x10000)


class _Lexer:
    """load.c's stream_t and lex_t: bytes in, tokens out, line/column/saved text kept."""

    def __init__(self, data: bytes) -> None:
        nul = data.find(b"\0")
        self.data = data if nul < 0 else data[:nul]
        self.pos = 0
        self.buffer = b""  # the UTF-8 sequence being read (stream->buffer)
        self.bpos = 0
        self.state = 0
        self.line, self.column, self.last_column = 1, 0, 0
        self.saved = bytearray()
        self.token: str | int = T_INVALID
        self.error: str | None = None
        self.depth = 0
        self.nul = False  # the string token holds \\u0000

    # -- stream_get / stream_unget --------------------------------------------
    def get(self) -> int:
        if self.state:
            return self.state
        if self.bpos >= len(self.buffer):
            if self.pos >= len(self.data):
                self.state = EOF
                return EOF
            c = self.data[self.pos]
            n = _utf8_len(c) if c >= 0x80 else 1
            seq = self.data[self.pos:self.pos + n] if n else bytes([c])
            self.pos += max(n, 1)
            if c >= 0x80 and (not n or len(seq) < n or not _utf8_full(seq)):
                self.state = ERROR
                self.set_error(f"unable to decode byte 0x{c:x}")
                return ERROR
            self.buffer, self.bpos = seq, 0
        c = self.buffer[self.bpos]
        self.bpos += 1
        if c == 0x0A:
            self.line += 1
            self.last_column, self.column = self.column, 0
        elif _utf8_len(c):
            self.column += 1
        return c

    def unget(self, c: int) -> None:
        if c in (EOF, ERROR):
            return
        if c == 0x0A:
            self.line -= 1
            self.column = self.last_column
        elif _utf8_len(c):
            self.column -= 1
        self.bpos -= 1

    def get_save(self) -> int:
        c = self.get()
        if c >= 0:
            self.saved.append(c)
        return c

    def unget_unsave(self, c: int) -> None:
        if c not in (EOF, ERROR):
            self.unget(c)
            self.saved.pop()

    # -- error_set --------------------------------------------------------------
    def set_error(self, msg: str, raise_: bool = False) -> None:
        if self.error is None:
            if self.saved:
                text = msg
                if len(self.saved) <= 20:
                    near = self.saved.decode("utf-8", "replace")
                    text = f"{msg} near '{near}'"
            elif self.state == ERROR:
                text = msg
            else:
                text = f"{msg} near end of file"
            self.error = f"{text[:TEXT_LENGTH - 1]}: <string>@{self.line}:{self.column}"
        if raise_:
            raise _Error(self.error)

    # -- lex_scan ------------------------------------------------------------------
    def scan(self) -> str | int:
        self.saved.clear()
        self.nul = False
        c = self.get()
        while c in (0x20, 0x09, 0x0A, 0x0D):
            c = self.get()
        if c == EOF:
            self.token = T_EOF
        elif c == ERROR:
            self.token = T_INVALID
        else:
            self.saved.append(c)
            if c in b"{}[]:,":
                self.token = c
            elif c == 0x22:
                self._string()
            elif 0x30 <= c <= 0x39 or c == 0x2D:
                self._number(c)
            elif 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A:
                c = self.get_save()
                while 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A:
                    c = self.get_save()
                self.unget_unsave(c)
                word = bytes(self.saved)
                self.token = {b"true": T_TRUE, b"false": T_FALSE,
                              b"null": T_NULL}.get(word, T_INVALID)
            else:
                # lex_save_cached: the rest of the UTF-8 sequence read
                self.saved += self.buffer[self.bpos:]
                self.bpos = len(self.buffer)
                self.token = T_INVALID
        return self.token

    def _string(self) -> None:
        self.token = T_INVALID
        c = self.get_save()
        while c != 0x22:
            if c == ERROR:
                return
            if c == EOF:
                return self.set_error("premature end of input")
            if 0 <= c <= 0x1F:
                self.unget_unsave(c)
                return self.set_error("unexpected newline" if c == 0x0A
                                      else f"control character 0x{c:x}")
            if c == 0x5C:
                c = self.get_save()
                if c == 0x75:  # u
                    c = self.get_save()
                    for _ in range(4):
                        if not (c >= 0 and chr(c) in "0123456789abcdefABCDEF"):
                            return self.set_error("invalid escape")
                        c = self.get_save()
                elif c >= 0 and chr(c) in '"\\/bfnrt':
                    c = self.get_save()
                else:
                    return self.set_error("invalid escape")
            else:
                c = self.get_save()
        self._unicode_escapes(bytes(self.saved))
        self.token = T_STRING

    def _unicode_escapes(self, raw: bytes) -> None:
        """The decoding pass of lex_scan_string: \\u0000 and surrogates."""
        i = raw.find(b"\\")
        while i >= 0:
            if raw[i + 1:i + 2] != b"u":
                i = raw.find(b"\\", i + 2)
                continue
            value = int(raw[i + 2:i + 6], 16)
            if 0xD800 <= value <= 0xDBFF:
                if raw[i + 6:i + 8] != b"\\u":
                    return self.set_error(f"invalid Unicode '\\u{value:04X}'", True)
                value2 = int(raw[i + 8:i + 12], 16)
                if not 0xDC00 <= value2 <= 0xDFFF:
                    return self.set_error(
                        f"invalid Unicode '\\u{value:04X}\\u{value2:04X}'", True)
                i += 6
            elif 0xDC00 <= value <= 0xDFFF:
                return self.set_error(f"invalid Unicode '\\u{value:04X}'", True)
            elif value == 0:
                self.nul = True  # parse_value or parse_object refuses it
            i = raw.find(b"\\", i + 6)

    def _number(self, c: int) -> None:
        self.token = T_INVALID

        def digit(x: int) -> bool:
            return 0x30 <= x <= 0x39

        if c == 0x2D:
            c = self.get_save()
        if c == 0x30:
            c = self.get_save()
            if digit(c):
                return self.unget_unsave(c)
        elif digit(c):
            c = self.get_save()
            while digit(c):
                c = self.get_save()
        else:
            return self.unget_unsave(c)
        if c not in (0x2E, 0x45, 0x65):
            self.unget_unsave(c)
            n = int(self.saved)
            if not -INT64_MAX - 1 <= n <= INT64_MAX:
                return self.set_error("too big negative integer" if n < 0
                                      else "too big integer")
            self.token = T_INT
            return
        if c == 0x2E:
            c = self.get()
            if not digit(c):
                return self.unget(c)
            self.saved.append(c)
            c = self.get_save()
            while digit(c):
                c = self.get_save()
        if c in (0x45, 0x65):
            c = self.get_save()
            if c in (0x2B, 0x2D):
                c = self.get_save()
            if not digit(c):
                return self.unget_unsave(c)
            c = self.get_save()
            while digit(c):
                c = self.get_save()
        self.unget_unsave(c)
        if abs(float(self.saved)) == float("inf"):
            return self.set_error("real number overflow")
        self.token = T_REAL


def _fail(lex: _Lexer, msg: str) -> None:
    lex.set_error(msg, True)


def _parse(lex: _Lexer) -> None:
    """parse_json with flags 0: an object or array, then the end of the input."""
    lex.scan()
    if lex.token not in (0x5B, 0x7B):
        _fail(lex, "'[' or '{' expected")
    # each open container: "{" or "[" (parse_object / parse_array's loops)
    stack: list[int] = []
    value_pending = True  # lex.token starts a value
    while True:
        if value_pending:
            lex.depth += 1
            if lex.depth > MAX_DEPTH:
                _fail(lex, "maximum parsing depth reached")
            tok = lex.token
            if tok == 0x7B:
                lex.scan()
                if lex.token == 0x7D:
                    lex.depth -= 1
                    value_pending = False
                else:
                    stack.append(0x7B)
                    _key(lex)
                    continue
            elif tok == 0x5B:
                lex.scan()
                if lex.token == 0x5D:
                    lex.depth -= 1
                    value_pending = False
                elif lex.token == T_EOF:
                    _fail(lex, "']' expected")
                else:
                    stack.append(0x5B)
                    continue
            elif tok == T_INVALID:
                _fail(lex, "invalid token")
            elif tok == T_STRING and lex.nul:
                _fail(lex, "\\u0000 is not allowed without JSON_ALLOW_NUL")
            elif tok in (T_STRING, T_INT, T_REAL, T_TRUE, T_FALSE, T_NULL):
                lex.depth -= 1
                value_pending = False
            else:
                _fail(lex, "unexpected token")
        # a value ended: the container it is in goes on or closes
        if not stack:
            break
        lex.scan()
        if lex.token == 0x2C:
            lex.scan()
            if stack[-1] == 0x7B:
                _key(lex)
            elif lex.token == T_EOF:
                _fail(lex, "']' expected")
            value_pending = True
            continue
        if lex.token != (0x7D if stack[-1] == 0x7B else 0x5D):
            _fail(lex, "'}' expected" if stack[-1] == 0x7B else "']' expected")
        stack.pop()
        lex.depth -= 1
    lex.scan()
    if lex.token != T_EOF:
        _fail(lex, "end of file expected")


def _key(lex: _Lexer) -> None:
    """An object member's key and colon; leaves lex.token at its value's first token."""
    if lex.token != T_STRING:
        _fail(lex, "string or '}' expected")
    if lex.nul:
        _fail(lex, "NUL byte in object key not supported")
    lex.scan()
    if lex.token != 0x3A:
        _fail(lex, "':' expected")
    lex.scan()


def jansson_error(data: bytes) -> str | None:
    """jansson's ``error.text`` and place (``TEXT: <string>@LINE:COLUMN``) for ``data``,
    or None when ``json_loads(data, 0, ...)`` accepts it."""
    lex = _Lexer(data)
    try:
        _parse(lex)
    except _Error:
        pass
    return lex.error


def loads(raw: bytes | str):
    """The JSON value of ``raw`` as ``json_loads(raw, 0, ...)`` reads it (up to a NUL
    byte). Raises JanssonError with jansson's words when it refuses it."""
    data = raw.encode() if isinstance(raw, str) else raw
    err = jansson_error(data)
    if err is not None:
        raise JanssonError(err)
    nul = data.find(b"\0")
    return json.loads(data if nul < 0 else data[:nul])
