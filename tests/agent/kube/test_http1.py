"""The one HTTP/1.1 answer parser (agent/kube/http1.py) that the binder's writes and the API
emulator's webhook client share, fed bytes directly (no socket).

Oracles from outside the parser: RFC 9112's message framing (Content-Length; the chunked
coding with extensions, a last chunk and trailers; no body after HEAD, 204 and 304; a body
delimited by the connection's end; keep-alive by version and ``Connection``), written out by
hand in each stream below, and a stream of several answers split at every byte boundary
giving the same answers as the whole stream fed at once."""

from __future__ import annotations

import pytest
from fluxnode.agent.kube.http1 import MAX_HEADERS, ProtocolError, Response, ResponseParser


def answers(data: bytes | list[bytes], head: bool = False, eof: bool = False,
            parser: ResponseParser | None = None) -> list[Response]:
    """Every complete answer of `data` (fed piece by piece when a list), then `eof`."""
    p = parser or ResponseParser()
    out = []
    for piece in [data] if isinstance(data, bytes) else data:
        p.feed(piece)
        while (r := p.next_response(head)) is not None:
            out.append(r)
    if eof:
        out.append(p.eof())
    return out


def summary(rs: list[Response]) -> list[tuple]:
    return [(r.status, r.reason, r.headers, r.data, r.keep_alive) for r in rs]


LENGTH = (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Two:  a b \r\n"
          b"Content-Length: 13\r\n\r\n{\"kind\":\"B\"}\n")
CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5;name=value;x\r\nhello\r\n"
           b"7 ; ext=\"q;r\"\r\n, world\r\n"
           b"0;last\r\nX-Trailer: t\r\nY: 2\r\n\r\n")
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nAudit-Id: 1\r\n\r\n"
NOT_MODIFIED = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n"
TO_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end\r\n\r\n"
STREAM = LENGTH + CHUNKED + NO_CONTENT + NOT_MODIFIED + TO_CLOSE
EXPECTED = [
    (201, "Created", {"content-type": "application/json", "x-two": "a b",
                      "content-length": "13"}, b'{"kind":"B"}\n', True),
    (200, "OK", {"transfer-encoding": "chunked"}, b"hello, world", True),
    (204, "No Content", {"audit-id": "1"}, b"", True),
    (304, "Not Modified", {"content-length": "50"}, b"", True),
    (200, "OK", {"content-type": "text/plain"}, b"until the end\r\n\r\n", False),
]


def test_pipelined_answers_of_every_framing_in_order():
    assert summary(answers(STREAM, eof=True)) == EXPECTED


def test_the_same_answers_whatever_the_split_of_the_bytes():
    for cut in range(1, len(STREAM)):
        assert summary(answers([STREAM[:cut], STREAM[cut:]], eof=True)) == EXPECTED, cut
    one_by_one = [STREAM[i:i + 1] for i in range(len(STREAM))]
    assert summary(answers(one_by_one, eof=True)) == EXPECTED


def test_a_chunk_split_anywhere_in_three_pieces():
    """Cuts inside a chunk's data, its CRLF, a size line and the trailers, two at a time."""
    for a in range(1, len(CHUNKED) - 1):
        for b in range(a + 1, len(CHUNKED)):
            (r,) = answers([CHUNKED[:a], CHUNKED[a:b], CHUNKED[b:]])
            assert r.data == b"hello, world", (a, b)


def test_a_body_that_comes_in_many_pieces_is_whole():
    body = bytes(range(256)) * 4096  # 1 MiB
    stream = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    (r,) = answers([stream[i:i + 1000] for i in range(0, len(stream), 1000)])
    assert r.data == body
    chunks = b"".join(b"%x\r\n" % 4096 + body[i:i + 4096] + b"\r\n"
                      for i in range(0, len(body), 4096))
    stream = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    (r,) = answers([stream[i:i + 1000] for i in range(0, len(stream), 1000)])
    assert r.data == body


def test_no_body_after_head_whatever_the_length_says():
    stream = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + LENGTH
    first, second = answers(stream, head=True)
    assert (first.status, first.data, first.headers["content-length"]) == (200, b"", "1000")
    assert second.status == 201  # its bytes were not taken as the HEAD answer's body


def test_an_interim_answer_is_skipped_and_blank_lines_before_a_head_too():
    (r,) = answers(b"\r\n\nHTTP/1.1 100 Continue\r\n\r\n\r\n" + LENGTH)
    assert (r.status, r.data) == (201, b'{"kind":"B"}\n')


def test_bare_lf_ends_lines_as_crlf_does():
    stream = (b"HTTP/1.1 200 OK\nContent-Length: 2\n\nokHTTP/1.1 200 OK\n"
              b"Transfer-Encoding: chunked\n\n2\nab\n0\n\n")
    assert [r.data for r in answers(stream)] == [b"ok", b"ab"]


@pytest.mark.parametrize("head, keep", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
])
def test_keep_alive_by_version_and_connection_header(head, keep):
    (r,) = answers(head)
    assert r.keep_alive is keep


def test_a_status_line_without_reason():
    (r,) = answers(b"HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n")
    assert (r.status, r.reason, r.getheaders()) == (404, "", {"content-length": "0"})


@pytest.mark.parametrize("stream, words", [
    (b"garbage\r\n\r\n", "malformed HTTP status line 'garbage'"),
    (b"SPDY/3 200 OK\r\n\r\n", "malformed HTTP status line 'SPDY/3 200 OK'"),
    (b"HTTP/1.1 2OO OK\r\n\r\n", "malformed HTTP status line 'HTTP/1.1 2OO OK'"),
    (b"HTTP/1.1 20 OK\r\n\r\n", "malformed HTTP status line"),
    ("HTTP/1.1 2²0 OK\r\n\r\n".encode("latin-1"), "malformed HTTP status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed HTTP header line 'no colon here'"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\n", "malformed Content-Length '-4'"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", "malformed Content-Length '1e3'"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size b'zz'"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\n", "malformed chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n", "malformed chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1_0\r\n", "malformed chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;x\r\n", "malformed chunk size b''"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX",
     "malformed chunk (no CRLF after its data)"),
])
def test_malformed_framing_is_an_error_naming_what_is_wrong(stream, words):
    with pytest.raises(ProtocolError) as exc:
        answers(stream)
    assert words in str(exc.value), exc.value
    assert isinstance(exc.value, ConnectionError)  # the connection cannot be used again


def test_an_over_long_head_fails_once_past_the_bound_not_at_its_end():
    p = ResponseParser(max_head=1024)
    p.feed(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 1000)
    assert p.next_response() is None  # under the bound: more may come
    p.feed(b"a" * 100)
    with pytest.raises(ProtocolError, match="headers are longer than 1024 bytes"):
        p.next_response()
    # found whole, the same: its end is past the bound
    p = ResponseParser(max_head=1024)
    p.feed(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
    with pytest.raises(ProtocolError, match="headers are longer than 1024 bytes"):
        p.next_response()


def test_too_many_header_lines():
    lines = b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS))
    (r,) = answers(b"HTTP/1.1 200 OK\r\n" + lines + b"\r\n", eof=True)
    assert len(r.headers) == MAX_HEADERS
    with pytest.raises(ProtocolError, match=f"more than {MAX_HEADERS} header lines"):
        answers(b"HTTP/1.1 200 OK\r\n" + lines + b"X-Last: v\r\n\r\n")


def test_chunk_size_lines_and_trailers_are_bounded():
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    with pytest.raises(ProtocolError, match="chunk-size or trailer line longer than 64"):
        answers(chunked + b"5;" + b"x" * 100, parser=ResponseParser(max_head=64))
    trailers = b"".join(b"T-%d: %s\r\n" % (i, b"v" * 20) for i in range(10))
    (r,) = answers(chunked + b"0\r\n" + trailers[:54] + b"\r\n",
                   parser=ResponseParser(max_head=64))
    assert r.data == b""
    with pytest.raises(ProtocolError, match="trailers are longer than 64 bytes"):
        answers(chunked + b"0\r\n" + trailers, parser=ResponseParser(max_head=64))


def test_the_body_bound_when_given():
    bounded = ResponseParser(max_body=10)
    assert answers(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789",
                   parser=bounded)[0].data == b"0123456789"
    with pytest.raises(ProtocolError, match=r"an answer of 11 bytes \(at most 10 are read\)"):
        # refused on its head: no byte of the body is waited for
        answers(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", parser=ResponseParser(
            max_body=10))
    with pytest.raises(ProtocolError, match="an answer of more than 10 bytes"):
        answers(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n012345\r\n5\r\n",
                parser=ResponseParser(max_body=10))
    with pytest.raises(ProtocolError, match="an answer of more than 10 bytes"):
        answers([b"HTTP/1.1 200 OK\r\n\r\n012345", b"67890"], parser=ResponseParser(
            max_body=10))


def test_the_connections_end():
    p = ResponseParser()
    with pytest.raises(ProtocolError, match="closed before the answer"):
        p.eof()
    for cut in (5, len(LENGTH) - 1):  # in its head, in its body
        p = ResponseParser()
        p.feed(LENGTH[:cut])
        assert p.next_response() is None
        with pytest.raises(ProtocolError, match="closed in the middle of the answer"):
            p.eof()
    p = ResponseParser()
    p.feed(LENGTH)
    assert p.next_response().status == 201
    with pytest.raises(ProtocolError, match="closed before the answer"):
        p.eof()  # after a whole answer: before the next one
