"""Malformed JSON, as Fluxion's readers word it (issue 35): jansson's error texts.

Fluxion's JGF reader (``fetch_jgf``) passes on jansson's ``error.text`` and place when
``json_loads`` refuses a document: at ``-L``, in ``update``'s and ``attach``'s errors.
The rv1exec reader says nothing of it, and a ``partial-cancel`` whose reader fails
prints dfu_impl_t::remove's "partial_cancel returned error." on stdout.

Every expected text below is Fluxion v0.54's (jansson 2.14), taken from
``resource-query -L FILE -f jgf -d < /dev/null`` (the error line on stderr) for each
document, and, for the command scenario, ``resource-query -L g.json -f rv1exec -d -t
OUT < COMMANDS`` with the files written by the test (2026-11-28).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from fluxnode.scheduler.readers.jansson_error import jansson_error
from support.rq_run import jobspec

# (document, jansson's text as Fluxion printed it)
FLUXION_JANSSON = [
    (b'[1,2',
     "']' expected near end of file: <string>@1:4"),
    (b'  \n\n  @',
     "'[' or '{' expected near '@': <string>@3:3"),
    (b'{"a": 1e999}',
     "real number overflow near '1e999': <string>@1:11"),
    (b'{"a": 1,}',
     "string or '}' expected near '}': <string>@1:9"),
    (b'',
     "'[' or '{' expected near end of file: <string>@1:0"),
    (b'{"graph":\n  {"nodes": [}\n',
     "unexpected token near '}': <string>@2:14"),
    (b'{',
     "string or '}' expected near end of file: <string>@1:1"),
    (b'"str"',
     '\'[\' or \'{\' expected near \'"str"\': <string>@1:5'),
    (b'{"a": "abc',
     'premature end of input near \'"abc\': <string>@1:10'),
    (b'{} x',
     "end of file expected near 'x': <string>@1:4"),
    (b'{"a": tru}',
     "invalid token near 'tru': <string>@1:9"),
    (b'{"a": "\xff"}',
     'unable to decode byte 0xff near \'"\': <string>@1:7'),
    (b'{"a":}',
     "unexpected token near '}': <string>@1:6"),
    (b'x',
     "'[' or '{' expected near 'x': <string>@1:1"),
    (b'{"a": 01}',
     "invalid token near '0': <string>@1:7"),
    (b'{"a": NaN}',
     "invalid token near 'NaN': <string>@1:9"),
    (b'{"a": 9223372036854775808}',
     "too big integer near '9223372036854775808': <string>@1:25"),
    (b'{"a": -9223372036854775809}',
     "too big negative integer near '-9223372036854775809': <string>@1:26"),
    (b'{"a": "\\u0000"}',
     '\\u0000 is not allowed without JSON_ALLOW_NUL near \'"\\u0000"\': <string>@1:14'),
    (b'{"\\u0000": 1}',
     'NUL byte in object key not supported near \'"\\u0000"\': <string>@1:9'),
    (b'{"a": "\\ud800"}',
     'invalid Unicode \'\\uD800\' near \'"\\ud800"\': <string>@1:14'),
    (b'{"a": "\\ud800\\u0041"}',
     'invalid Unicode \'\\uD800\\u0041\' near \'"\\ud800\\u0041"\': <string>@1:20'),
    (b'{"a": "\\udc00"}',
     'invalid Unicode \'\\uDC00\' near \'"\\udc00"\': <string>@1:14'),
    (b'{"a": "abcdefghijklmnopqrstuvwxyz',
     'premature end of input: <string>@1:33'),
    (b'{"a": "x\ty"}',
     'control character 0x9 near \'"x\': <string>@1:8'),
    (b'{"a": "x\ny"}',
     'unexpected newline near \'"x\': <string>@1:8'),
    (b'{"a": "\\q"}',
     'invalid escape near \'"\\q\': <string>@1:9'),
    (b'{"a": 1.}',
     "invalid token near '1.': <string>@1:8"),
    (b'{"a": 1e+}',
     "invalid token near '1e+': <string>@1:9"),
    (b'[1, 2,]',
     "unexpected token near ']': <string>@1:7"),
    (b'{"a" 1}',
     "':' expected near '1': <string>@1:6"),
    (b'{"\xc3\xa9": 1, "b": \xc3\xa9}',
     "invalid token near 'é': <string>@1:15"),
    (b'[\xe2\x82]',
     'unable to decode byte 0xe2: <string>@1:1'),

    (b"[" * 2049, "maximum parsing depth reached near '[': <string>@1:2049"),
]


@pytest.mark.parametrize(("doc", "expected"), FLUXION_JANSSON)
def test_jansson_error_text_and_place(doc: bytes, expected: str):
    assert jansson_error(doc) == expected


def test_a_document_jansson_reads_has_no_error():
    # what jansson accepts (Fluxion then reads its keys): no error text
    assert jansson_error(b'{"graph": {"nodes": [], "edges": []}}') is None
    assert jansson_error(b"[" * 2048 + b"]" * 2048) is None
    assert jansson_error(b'{"a": 1}\x00 after a NUL byte jansson never reads') is None


def test_load_file_says_what_fluxion_says(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"  \n\n  @")
    proc = subprocess.run([sys.executable, "-m", "fluxnode", "resource-query", "-L", str(bad),
                           "-f", "jgf", "-d"], input="", capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == (
        ": Runtime error: resource_query_t: ERROR: fetch_jgf: json_loads returned an error: "
        "'[' or '{' expected near '@': <string>@3:3.\n\nERROR: error generating resources\n\n")


GRAPH = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-3", "children": {"core": "0-1"}}],
    "nodelist": ["node[0-3]"], "starttime": 0, "expiration": 0}}
CORE = jobspec([{"type": "slot", "count": 1, "label": "default",
                 "with": [{"type": "core", "count": 1}]}], 60)
FILES = {
    "at.json": b"  \n\n  @",
    "nog.json": b'{"a":1}\n',
    "r9.json": json.dumps({"version": 1, "execution": {
        "R_lite": [{"rank": "9", "children": {"core": "0"}}], "nodelist": ["node9"],
        "starttime": 0, "expiration": 10}}).encode(),
    "empty_r.json": b'{"version": 1, "execution": {"R_lite": []}}\n',
    "empty_jgf.json": b'{"graph": {"nodes": [], "edges": []}}\n',
}
COMMANDS = """\
match allocate core.yaml
update allocate jgf at.json 5 0 10
update allocate rv1exec at.json 6 0 10
update allocate rv1exec nog.json 7 0 10
update allocate rv1exec r9.json 8 0 10
update allocate rv1exec empty_r.json 9 0 10
update allocate jgf empty_jgf.json 10 0 10
attach at.json
attach nog.json
partial-cancel 1 jgf at.json
partial-cancel 1 rv1exec at.json
partial-cancel 1 rv1exec empty_r.json
quit
"""
EXPECTED_OUT = (
    '      ---------core1[1:x]\n'
    '      ------node3[1:s]\n'
    '      ---cluster0[1:s]\n'
    'INFO: =============================\n'
    'INFO: JOBID=1\n'
    'INFO: RESOURCES=ALLOCATED\n'
    'INFO: SCHEDULED AT=Now\n'
    'INFO: =============================\n'
    'INFO: =============================\n'
    'INFO: No matching resources found\n'
    'INFO: JOBID=5\n'
    'INFO: =============================\n'
    'INFO: =============================\n'
    'INFO: No matching resources found\n'
    'INFO: JOBID=6\n'
    'INFO: =============================\n'
    'INFO: =============================\n'
    'INFO: No matching resources found\n'
    'INFO: JOBID=7\n'
    'INFO: =============================\n'
    'INFO: =============================\n'
    'INFO: No matching resources found\n'
    'INFO: JOBID=8\n'
    'INFO: =============================\n'
    'INFO: =============================\n'
    'INFO: No matching resources found\n'
    'INFO: JOBID=9\n'
    'INFO: =============================\n'
    'INFO: =============================\n'
    'INFO: No matching resources found\n'
    'INFO: JOBID=10\n'
    'INFO: =============================\n'
)
EXPECTED_STDOUT = (
    'remove: partial_cancel returned error.\n'
    'remove: partial_cancel returned error.\n'
    'remove: rank_to_root is empty.\n'
)
EXPECTED_STDERR = (
    'ERROR: traverser run () returned error \n'
    "ERROR: fetch_jgf: json_loads returned an error: '[' or '{' expected near '@': <string>@3:3.\n"
    'ERROR: traverser run () returned error \n'
    'ERROR: traverser run () returned error \n'
    'ERROR: traverser run () returned error \n'
    "ERROR: add_or_update: couldn't find vertex in graph for node9.\n"
    'unpack_rank: failed unpacking rank for node9.\n'
    'ERROR: traverser run () returned error \n'
    'ERROR: traverser run () returned error \n'
    "ERROR: can't attach JGF subgraph \n"
    'ERROR: add_subgraph: ERROR: add subgraph error: Invalid argument\n'
    "add_subgraph: ERROR: reader returned error: fetch_jgf: json_loads returned an error: "
    "'[' or '{' expected near '@': <string>@3:3.\n"
    '\n'
    '\n'
    "ERROR: can't attach JGF subgraph \n"
    'ERROR: add_subgraph: ERROR: add subgraph error: Invalid argument\n'
    "add_subgraph: ERROR: reader returned error: fetch_jgf: "
    "JGF does not contain a required key (graph).\n"
    '\n'
    '\n'
    'ERROR: error encountered while removing job 1\n'
    'ERROR: error encountered while removing job 1\n'
    'ERROR: error encountered while removing job 1\n'
)


def test_update_attach_and_partial_cancel_of_malformed_files(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GRAPH))
    (tmp_path / "core.yaml").write_text(yaml.safe_dump(CORE, sort_keys=False))
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "fluxnode", "resource-query", "-L", str(graph),
                           "-f", "rv1exec", "-d", "-t", str(out)], input=COMMANDS,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == EXPECTED_STDERR
    assert proc.stdout == EXPECTED_STDOUT
    assert out.read_text() == EXPECTED_OUT
