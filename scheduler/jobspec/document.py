"""A jobspec document as libjobspec sees it: yaml-cpp's view of YAML, and its conversions.

Fluxion parses with yaml-cpp, where every scalar is a string converted on use
(``count: 010`` is octal 8, ``exclusive: True`` is not ``true``). To accept and reject
what Fluxion does, text is composed (not constructed) with PyYAML into a `DocNode` tree
that keeps every scalar as text, and `as_int`, `as_double`, `as_str`... convert it with
yaml-cpp's rules (YAML_DEFINE_CONVERT_STREAMABLE: iostream parsing, base from the prefix).
An already-parsed ``dict`` is treated as the JSON it came from. `JobspecError` is
libjobspec's ``parse_error``: the path, Fluxion's wording and, for YAML text, the place.
The jobspec model and its checks (`jobspec.py`) sit on top of this module.

PyYAML is imported on the first text to read (`_pyyaml`), not with this module: the
leader's scheduler service takes jobspecs as mappings from the binder and slot kinds,
and never reads YAML unless someone sends text (`fluxnode alloc --jobspec FILE`).
PyYAML and its C parser, with the ``datetime`` and ``base64`` its constructor imports,
are about 1.5 MiB of a process's private memory (issue 32's leader).
"""

from __future__ import annotations

import errno
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

UINT_MAX = 0xFFFFFFFF
INT_MIN, INT_MAX = -(2**31), 2**31 - 1

#: Resource types Fluxion interns at start-up (resource/schema/data_std); resource-query
#: also knows the loaded graph's types and its prune-filter types before it closes the set.
FLUXION_STATIC_TYPES = frozenset({
    "cluster", "rack", "node", "socket", "core", "gpu", "slot", "xor_slot", "ssd",
    "storage_node",
})

UNKNOWN_TYPE = 'Value of "type" must be a resource type known to fluxion'
_BAD_CONVERSION = "bad conversion"
_INVALID_NODE = (
    "invalid node; this may result from using a map iterator as a sequence iterator, "
    "or vice-versa"
)


class JobspecError(ValueError):
    """A refused jobspec: where (``path``, and ``line``/``column`` in YAML text) and why.

    ``reason`` is Fluxion's wording and ``hint`` what the value should have been, in the
    user's terms. ``str()`` is fluxnode's one-line message, ``line L, column C: path:
    reason (hint)``, for the first error a user made (`Jobspec.parse` checks what is
    written before what is missing); ``what`` is the message Fluxion's ``parse_error``
    carries for the error libjobspec meets first (``fluxion``, when that is another one).
    ``line`` is 1-based and ``column`` 0-based, as libjobspec's ``parse_error`` holds them.
    """

    def __init__(
        self,
        path: str,
        reason: str,
        *,
        line: int | None = None,
        column: int | None = None,
        yaml_cpp: bool = False,
        hint: str = "",
        placed: bool = True,
    ) -> None:
        self.path = path
        #: what the value should have been, in the user's terms (not in Fluxion's `what`)
        self.hint = hint
        self.reason = reason
        self.line = line
        self.column = column
        self.yaml_cpp = yaml_cpp
        #: the errno a service answers with: EINVAL, or E2BIG for a jobspec over `Limits`
        self.errnum = errno.EINVAL
        #: the error libjobspec reports first, when it is not this one (its checks run in
        #: another order); `what` is its message
        self.fluxion: JobspecError | None = None
        place = f"line {line}, column {column + 1}: " if (
            placed and line is not None and column is not None) else ""
        where = f"{path}: " if path else ("" if place else "jobspec: ")
        super().__init__(f"{place}{where}{reason}" + (f" ({hint})" if hint else ""))

    @property
    def what(self) -> str:
        """The message Fluxion's ``parse_error`` carries (``Jobspec error for N: <what>``)."""
        if self.fluxion is not None:
            return self.fluxion.what
        if self.yaml_cpp and self.line is not None and self.column is not None:
            return f"yaml-cpp: error at line {self.line}, column {self.column + 1}: {self.reason}"
        return self.reason


# --------------------------------------------------------------------------------------
# A yaml-cpp-like view of the document: every scalar is text, null is its own kind.


@dataclass(slots=True)
class DocNode:
    kind: str  # "map" | "seq" | "scalar" | "null"
    value: Any  # list[tuple[DocNode, DocNode]] | list[DocNode] | str | None
    quoted: bool = False  # yaml-cpp Tag() == "!" (a non-plain scalar)
    line: int | None = None  # 0-based, like yaml-cpp's Mark
    column: int | None = None
    py: Any = None  # the original Python value when built from a parsed mapping

    def get(self, key: str) -> DocNode | None:
        """First value whose key is the scalar ``key`` (yaml-cpp ``node[key]``)."""
        if self.kind != "map":
            return None
        for k, v in self.value:
            if k.value == key and k.kind == "scalar":  # (the commoner miss first)
                return v
        return None

    def __len__(self) -> int:
        return len(self.value) if self.kind in ("map", "seq") else 0


def _from_python(obj: Any, path: str, budget: _Budget, depth: int) -> DocNode:
    budget.add(1, depth)
    if obj is None:
        return DocNode("null", None)
    if isinstance(obj, bool):
        return DocNode("scalar", "true" if obj else "false", py=obj)
    if isinstance(obj, int):
        return DocNode("scalar", str(obj) if abs(obj) < 10**18 else _BIG, py=obj)
    if isinstance(obj, float):
        text = repr(obj) if math.isfinite(obj) else _float_text(obj)
        return DocNode("scalar", text, py=obj)
    if isinstance(obj, str):
        return DocNode("scalar", obj, quoted=True, py=obj)
    if isinstance(obj, Mapping):
        return DocNode(
            "map",
            [(DocNode("scalar", str(k), quoted=True),
              _from_python(v, join_path(path, str(k)), budget, depth + 1))
             for k, v in obj.items()],
        )
    if isinstance(obj, list | tuple):
        return DocNode("seq", [_from_python(v, f"{path}[{i}]", budget, depth + 1)
                               for i, v in enumerate(obj)])
    raise JobspecError(path, f"unsupported value of type {type(obj).__name__}")


#: the text of an integer too large for any count (str() of a huge int is quadratic)
_BIG = "99999999999999999999"


def _float_text(x: float) -> str:
    if math.isnan(x):
        return ".nan"
    return ".inf" if x > 0 else "-.inf"


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _PyYaml:
    """PyYAML and what this module uses of it, made once, on the first text read.

    The loader is libyaml's parser when PyYAML was built with it (10x faster), else the
    Python one. Only its event stream is used: the tree is built here, without recursion
    (PyYAML's own C composer recurses once per nesting level and crashes the process on
    ``[[[[...``). The resolver and constructor give pass-through scalars (`to_python`)
    the value ``yaml.safe_load`` would."""

    __slots__ = ("yaml", "loader", "resolver", "constructor")

    def __init__(self) -> None:
        import yaml  # see the module docstring: only text needs it

        self.yaml = yaml
        self.loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        self.resolver = yaml.resolver.Resolver()
        self.constructor = yaml.constructor.SafeConstructor()


@cache
def _pyyaml() -> _PyYaml:
    """The one `_PyYaml` of this process, made on first use."""
    return _PyYaml()


_NULL_TAG = "tag:yaml.org,2002:null"
_NULL_TEXTS = frozenset({"", "~", "null", "Null", "NULL"})


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on one jobspec, checked before (text size) and while (depth, nodes) it is
    read, so no jobspec can hold the caller for long or grow it without end.

    ``max_bytes``: the UTF-8 text, or ``str()`` of nothing for a parsed mapping (whose size
    the message layer bounds); ``max_depth``: mappings and sequences nested in one another
    (a plain jobspec needs about 12, each constraint level 2 more); ``max_nodes``: every
    mapping, sequence and scalar counted as often as YAML aliases repeat it (a 229-byte
    alias bomb expands to hundreds of millions).
    """

    max_bytes: int = 1 << 20
    max_depth: int = 64
    max_nodes: int = 4096


#: The limits `Jobspec.parse` applies unless given others.
DEFAULT_LIMITS = Limits()


class _Budget:
    """Counts the nodes of one document against `Limits`."""

    __slots__ = ("limits", "nodes")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.nodes = 0

    def add(self, n: int, depth: int, mark: Any = None) -> None:
        self.nodes += n
        if self.nodes > self.limits.max_nodes:
            raise _limit_error(
                f"jobspec has more than {self.limits.max_nodes} nodes (YAML aliases count "
                "each time they are used)", mark)
        if depth > self.limits.max_depth:
            raise _limit_error(
                f"jobspec nests too deeply: more than {self.limits.max_depth} mappings and "
                "sequences",
                mark)


def _limit_error(reason: str, mark: Any) -> JobspecError:
    # (the place stays out of the message: a bound on the whole document, not a mistake there)
    err = JobspecError("", reason, line=mark.line + 1 if mark is not None else None,
                       column=mark.column if mark is not None else None, placed=False)
    err.errnum = errno.E2BIG
    return err


class _Frame:
    """A mapping or sequence being built: its node, size and height so far."""

    __slots__ = ("node", "size", "height", "anchor", "key", "seq", "items")

    def __init__(self, node: DocNode, anchor: str | None) -> None:
        self.node = node
        self.size = 1
        self.height = 1
        self.anchor = anchor
        self.key: DocNode | None = None  # a mapping's key waiting for its value
        self.seq = node.kind == "seq"
        self.items: list = node.value


def _compose_first(text: str, budget: _Budget) -> DocNode:
    """The first document of `text` as a DocNode tree (PyYAML's composer, without
    recursion and within `budget`; aliases share the node they name).

    One loop over libyaml's events, dispatched by exact class, the commonest (a
    scalar) first, with the budget and the attachment to the open collection in line:
    a jobspec is read on every match, and the generic composer was a third of a
    single-core match in resource-query."""
    pyyaml = _pyyaml()
    yaml = pyyaml.yaml
    _ScalarEvent, _AliasEvent = yaml.ScalarEvent, yaml.AliasEvent
    _SequenceStartEvent, _MappingStartEvent = yaml.SequenceStartEvent, yaml.MappingStartEvent
    _SequenceEndEvent, _MappingEndEvent = yaml.SequenceEndEvent, yaml.MappingEndEvent
    _DocumentStartEvent, _DocumentEndEvent = yaml.DocumentStartEvent, yaml.DocumentEndEvent
    _StreamEndEvent = yaml.StreamEndEvent
    # node, size, height; size None while the anchored collection is still open
    anchors: dict[str, tuple[DocNode, int | None, int]] = {}
    stack: list[_Frame] = []
    root: DocNode | None = None
    started = False
    max_nodes = budget.limits.max_nodes
    max_depth = budget.limits.max_depth

    def remember(anchor: str, node: DocNode, size: int | None, height: int,
                 mark: Any) -> None:
        if anchor in anchors:
            first = anchors[anchor][0]
            raise yaml.composer.ComposerError(
                None, None, f"found duplicate anchor {anchor!r} (first at line "
                f"{first.line + 1}, column {first.column + 1})", mark)
        anchors[anchor] = (node, size, height)

    loader = pyyaml.loader(text)
    try:
        check_event, get_event = loader.check_event, loader.get_event
        while check_event():
            event = get_event()
            cls = event.__class__
            if cls is _ScalarEvent and started:
                mark = event.start_mark
                budget.nodes += 1
                depth = len(stack) + 1
                if budget.nodes > max_nodes or depth > max_depth:
                    budget.add(0, depth, mark)  # raises
                # the resolver's null (PyYAML's composer resolves every tag; only null
                # matters)
                value = event.value
                plain = not event.style
                if plain and (event.tag == _NULL_TAG
                              or (event.tag is None and value in _NULL_TEXTS)):
                    node = DocNode("null", None, False, mark.line, mark.column)
                else:
                    node = DocNode("scalar", value, not plain, mark.line, mark.column)
                if event.anchor is not None:
                    remember(event.anchor, node, 1, 1, mark)
                size = height = 1
            elif (cls is _MappingStartEvent or cls is _SequenceStartEvent) and started:
                mark = event.start_mark
                budget.nodes += 1
                depth = len(stack) + 1
                if budget.nodes > max_nodes or depth > max_depth:
                    budget.add(0, depth, mark)  # raises
                frame = _Frame(DocNode("seq" if cls is _SequenceStartEvent else "map", [],
                                       False, mark.line, mark.column), event.anchor)
                if event.anchor is not None:  # open until its end event
                    remember(event.anchor, frame.node, None, 0, mark)
                stack.append(frame)
                continue
            elif (cls is _MappingEndEvent or cls is _SequenceEndEvent) and started:
                frame = stack.pop()
                if frame.anchor is not None:
                    anchors[frame.anchor] = (frame.node, frame.size, frame.height)
                node, size, height = frame.node, frame.size, frame.height
            elif cls is _DocumentStartEvent:
                started = True
                continue
            elif cls is _DocumentEndEvent or cls is _StreamEndEvent:
                break
            elif not started:
                continue
            elif cls is _AliasEvent:
                if event.anchor not in anchors:
                    raise yaml.composer.ComposerError(
                        None, None, f"found undefined alias {event.anchor!r}",
                        event.start_mark)
                node, size, height = anchors[event.anchor]
                if size is None:
                    raise _limit_error(
                        f"jobspec nests too deeply: alias *{event.anchor} is inside the "
                        f"collection &{event.anchor} it names", event.start_mark)
                budget.add(size, len(stack) + height, event.start_mark)
            else:
                continue
            # attach the finished node to the open collection (or make it the root)
            if not stack:
                root = node
                continue
            top = stack[-1]
            top.size += size
            if top.height <= height:
                top.height = height + 1
            if top.seq:
                top.items.append(node)
            elif top.key is None:
                top.key = node
            else:
                top.items.append((top.key, node))
                top.key = None
    finally:
        loader.dispose()
    return root if root is not None else DocNode("null", None)


def load_document(obj: Mapping | str | bytes, limits: Limits = DEFAULT_LIMITS) -> DocNode:
    budget = _Budget(limits)
    if not isinstance(obj, str | bytes):
        return _from_python(obj, "", budget, 1)
    if isinstance(obj, str):
        try:
            data = obj.encode("utf-8")
        except UnicodeEncodeError as e:
            raise JobspecError(
                "", f"jobspec is not valid Unicode text: {e.reason} at character {e.start}"
            ) from None
    else:
        data = obj
    if len(data) > limits.max_bytes:
        err = JobspecError("", f"jobspec is {len(data)} bytes, more than the limit of "
                           f"{limits.max_bytes}")
        err.errnum = errno.E2BIG
        raise err
    if isinstance(obj, bytes):
        try:
            obj = obj.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JobspecError(
                "", f"jobspec is not UTF-8 text: byte 0x{data[e.start]:02x} at offset "
                f"{e.start} ({e.reason})") from None
    yaml = _pyyaml().yaml
    try:
        return _compose_first(obj, budget)
    except yaml.YAMLError as e:
        if getattr(e, "problem", None) == "exceeded maximum nesting depth":
            # libyaml (PyYAML >= 6.0.3 wheels) refuses deep nesting in its scanner, which reads
            # ahead of the events our budget counts: the same limit, reached first.
            raise _limit_error(
                f"jobspec nests too deeply: more than {limits.max_depth} mappings and "
                "sequences", getattr(e, "problem_mark", None)) from None
        # PyYAML (YAML 1.1) refuses a little JSON that yaml-cpp takes; JSON decides then.
        try:
            return _from_python(json.loads(obj), "", _Budget(limits), 1)
        except json.JSONDecodeError as json_error:
            raise _syntax_error(obj, e, json_error) from None
        except (ValueError, RecursionError):
            pass
        raise _syntax_error(obj, e, None) from None


#: a document that opens like JSON (an object with a quoted key, or an array): its JSON
#: error names the place better than YAML's (``[1, 2`` fails at the end of the text in YAML)
_JSON_START = re.compile(r'\s*(\[|\{\s*["}])')


def _syntax_error(text: str, e: yaml.YAMLError,
                  json_error: json.JSONDecodeError | None) -> JobspecError:
    """The YAML error as Fluxion's yaml-cpp would place it (`what`), reported to the user
    as ``line L, column C: problem (while parsing X started at line L, column C)``, or as
    the JSON error when the text is JSON."""
    if isinstance(e, _pyyaml().yaml.reader.ReaderError):
        # a character YAML refuses anywhere, so its first occurrence is the place (libyaml's
        # position counts bytes, PyYAML's characters)
        at = max(text.find(chr(e.character)), 0)
        line, start = text.count("\n", 0, at) + 1, text.rfind("\n", 0, at) + 1
        return JobspecError("", f"unacceptable character #x{e.character:04x}: {e.reason}",
                            line=line, column=at - start)
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
    hint = (f"{context} started at line {cmark.line + 1}, column {cmark.column + 1}"
            if context and cmark is not None else "")
    err = JobspecError("", problem, line=mark.line + 1 if mark else None,
                       column=mark.column if mark else None, yaml_cpp=mark is not None,
                       hint=hint)
    if json_error is None or not _JSON_START.match(text):
        return err
    as_json = JobspecError("", json_error.msg, line=json_error.lineno,
                           column=json_error.colno - 1, hint="read as JSON")
    as_json.fluxion = err
    return as_json


# --------------------------------------------------------------------------------------
# yaml-cpp conversions (YAML_DEFINE_CONVERT_STREAMABLE: iostream parsing, base from prefix)

_INT_RE = re.compile(r"([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\s*\Z")
_FLOAT_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*\Z")
_INF = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"}
_NINF = {"-.inf", "-.Inf", "-.INF"}
_NAN = {".nan", ".NaN", ".NAN"}


def _bad(node: DocNode, path: str, expected: str) -> JobspecError:
    line = node.line + 1 if node.line is not None else None
    if node.kind == "scalar":
        shown = repr(node.value if len(node.value) <= 40 else node.value[:40] + "...")
    else:
        shown = {"map": "a mapping", "seq": "a sequence", "null": "null"}[node.kind]
    return JobspecError(path, _BAD_CONVERSION, line=line, column=node.column, yaml_cpp=True,
                        hint=f"{shown} is not {expected}")


def as_int(node: DocNode, path: str, lo: int, hi: int, *, unsigned: bool) -> int:
    expected = f"an integer from {lo} to {hi}"
    if node.kind != "scalar":
        raise _bad(node, path, expected)
    text = node.value
    if text.isdigit() and text.isascii() and (text[0] != "0" or text == "0") and len(text) <= 24:
        # plain decimal digits (a count, a version): _INT_RE's third form, without it
        value = int(text)
        if not lo <= value <= hi:
            raise _bad(node, path, expected)
        return value
    m = _INT_RE.match(text)
    if m is None or (unsigned and m.group(1) == "-") or len(m.group(2)) > 24:
        raise _bad(node, path, expected)
    digits = m.group(2)
    if digits[:2] in ("0x", "0X"):
        value = int(digits, 16)
    elif len(digits) > 1 and digits[0] == "0":
        value = int(digits, 8)
    else:
        value = int(digits)
    if m.group(1) == "-":
        value = -value
    if not lo <= value <= hi:
        raise _bad(node, path, expected)
    return value


def as_unsigned(node: DocNode, path: str) -> int:
    return as_int(node, path, 0, UINT_MAX, unsigned=True)


def as_double(node: DocNode, path: str) -> float:
    if node.kind == "scalar":
        text = node.value
        if _FLOAT_RE.match(text):
            return float(text)
        if text in _INF:
            return math.inf
        if text in _NINF:
            return -math.inf
        if text in _NAN:
            return math.nan
    raise _bad(node, path, "a number")


def as_str(node: DocNode, path: str) -> str:
    if node.kind == "null":
        return "null"
    if node.kind != "scalar":
        raise _bad(node, path, "a string")
    return node.value


def as_char(node: DocNode, path: str) -> str:
    if node.kind != "scalar" or len(node.value.rstrip()) != 1 or node.value[0].isspace():
        raise _bad(node, path, "a single character")
    return node.value[0]


def error_at(node: DocNode, path: str, reason: str, hint: str = "") -> JobspecError:
    line = node.line + 1 if node.line is not None else None
    return JobspecError(path, reason, line=line, column=node.column, hint=hint)


def map_items(node: DocNode, path: str) -> Iterator[tuple[str, DocNode, str]]:
    """Iterate a mapping like yaml-cpp: nothing for scalars/null, an error for sequences."""
    if node.kind == "seq" and len(node):
        raise error_at(node, path, _INVALID_NODE)  # yaml-cpp's InvalidNode has no mark
    if node.kind != "map":
        return
    for k, v in node.value:
        key = as_str(k, path)
        yield key, v, join_path(path, key)



def to_python(node: DocNode, path: str = "attributes") -> Any:
    """Plain Python for pass-through data (user attributes, unknown system keys). YAML allows
    a mapping or sequence as a mapping key (`? [a]: 1`, `{{x: 1}: 2}`); JSON and Python
    dicts do not: such a key is a JobspecError naming where it is."""
    if node.kind == "null":
        return None
    if node.kind == "map":
        out = {}
        for k, v in node.value:
            if k.kind in ("map", "seq"):
                raise error_at(k, path, "a mapping key must be a scalar, not a "
                               + ("mapping" if k.kind == "map" else "sequence"))
            key = to_python(k, path)
            out[key] = to_python(v, join_path(path, str(key)))
        return out
    if node.kind == "seq":
        return [to_python(v, f"{path}[{i}]") for i, v in enumerate(node.value)]
    if node.py is not None:
        return node.py
    if node.quoted or not node.value:
        return node.value
    # what yaml.safe_load makes of a plain scalar, without parsing it again
    text = node.value
    if text.isdigit() and text.isascii() and len(text) < 19 and (text[0] != "0" or text == "0"):
        return int(text)  # the common case, 10x faster than the resolver
    pyyaml = _pyyaml()
    yaml = pyyaml.yaml
    tag = pyyaml.resolver.resolve(yaml.ScalarNode, node.value, (True, False))
    construct = pyyaml.constructor.yaml_constructors.get(tag)
    if construct is None:
        return node.value
    try:
        return construct(pyyaml.constructor, yaml.ScalarNode(tag, node.value))
    except (yaml.YAMLError, ValueError, OverflowError):
        return node.value
