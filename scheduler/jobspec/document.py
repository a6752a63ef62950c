"""A jobspec document as libjobspec sees it: yaml-cpp's view of YAML, and its conversions.

Fluxion parses with yaml-cpp, where every scalar is a string converted on use
(``count: 010`` is octal 8, ``exclusive: True`` is not ``true``). To accept and reject
what Fluxion does, text is composed (not constructed) with PyYAML into a `DocNode` tree
that keeps every scalar as text, and `as_int`, `as_double`, `as_str`... convert it with
yaml-cpp's rules (YAML_DEFINE_CONVERT_STREAMABLE: iostream parsing, base from the prefix).
An already-parsed ``dict`` is treated as the JSON it came from. `JobspecError` is
libjobspec's ``parse_error``: the path, Fluxion's wording and, for YAML text, the place.
The jobspec model and its checks (`jobspec.py`) sit on top of this module.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

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
    """A jobspec Fluxion would reject: ``path: reason``.

    ``path`` is where the problem is (``""`` for the document itself), ``reason`` is
    Fluxion's wording, ``line``/``column`` (1-based/0-based like libjobspec's
    ``parse_error``) locate it in YAML text when known, ``what`` is Fluxion's full message.
    """

    def __init__(
        self,
        path: str,
        reason: str,
        *,
        line: int | None = None,
        column: int | None = None,
        yaml_cpp: bool = False,
    ) -> None:
        self.path = path
        self.reason = reason
        self.line = line
        self.column = column
        self.yaml_cpp = yaml_cpp
        super().__init__(f"{path or 'jobspec'}: {reason}")

    @property
    def what(self) -> str:
        """The message Fluxion's ``parse_error`` carries (``Jobspec error for N: <what>``)."""
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
            if k.kind == "scalar" and k.value == key:
                return v
        return None

    def __len__(self) -> int:
        return len(self.value) if self.kind in ("map", "seq") else 0


def _from_yaml(node: yaml.Node) -> DocNode:
    line, col = node.start_mark.line, node.start_mark.column
    if isinstance(node, yaml.MappingNode):
        pairs = [(_from_yaml(k), _from_yaml(v)) for k, v in node.value]
        return DocNode("map", pairs, line=line, column=col)
    if isinstance(node, yaml.SequenceNode):
        return DocNode("seq", [_from_yaml(v) for v in node.value], line=line, column=col)
    plain = not node.style  # None (PyYAML) or "" (libyaml) for plain scalars
    if plain and node.tag == "tag:yaml.org,2002:null":
        return DocNode("null", None, line=line, column=col)
    return DocNode("scalar", node.value, quoted=not plain, line=line, column=col)


def _from_python(obj: Any, path: str) -> DocNode:
    if obj is None:
        return DocNode("null", None)
    if isinstance(obj, bool):
        return DocNode("scalar", "true" if obj else "false", py=obj)
    if isinstance(obj, int):
        return DocNode("scalar", str(obj), py=obj)
    if isinstance(obj, float):
        text = repr(obj) if math.isfinite(obj) else _float_text(obj)
        return DocNode("scalar", text, py=obj)
    if isinstance(obj, str):
        return DocNode("scalar", obj, quoted=True, py=obj)
    if isinstance(obj, Mapping):
        return DocNode(
            "map",
            [(DocNode("scalar", str(k), quoted=True), _from_python(v, join_path(path, str(k))))
             for k, v in obj.items()],
        )
    if isinstance(obj, list | tuple):
        return DocNode("seq", [_from_python(v, f"{path}[{i}]") for i, v in enumerate(obj)])
    raise JobspecError(path, f"unsupported value of type {type(obj).__name__}")


def _float_text(x: float) -> str:
    if math.isnan(x):
        return ".nan"
    return ".inf" if x > 0 else "-.inf"


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# libyaml's composer when PyYAML was built with it (10x faster), else the Python one
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_document(obj: Mapping | str | bytes) -> DocNode:
    if not isinstance(obj, str | bytes):
        return _from_python(obj, "")
    if isinstance(obj, bytes):
        try:
            obj = obj.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JobspecError("", f"jobspec is not UTF-8 text: {e}") from None
    try:
        for doc in yaml.compose_all(obj, Loader=_LOADER):
            return _from_yaml(doc)  # yaml-cpp's Load keeps the first document
    except yaml.YAMLError as e:
        # PyYAML (YAML 1.1) refuses a little JSON that yaml-cpp takes; JSON decides then.
        try:
            return _from_python(json.loads(obj), "")
        except ValueError:
            pass
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise JobspecError(
            "",
            problem,
            line=mark.line + 1 if mark else None,
            column=mark.column if mark else None,
            yaml_cpp=mark is not None,
        ) from None
    return DocNode("null", None)


# --------------------------------------------------------------------------------------
# yaml-cpp conversions (YAML_DEFINE_CONVERT_STREAMABLE: iostream parsing, base from prefix)

_INT_RE = re.compile(r"([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\s*\Z")
_FLOAT_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*\Z")
_INF = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"}
_NINF = {"-.inf", "-.Inf", "-.INF"}
_NAN = {".nan", ".NaN", ".NAN"}


def _bad(node: DocNode, path: str) -> JobspecError:
    line = node.line + 1 if node.line is not None else None
    return JobspecError(path, _BAD_CONVERSION, line=line, column=node.column, yaml_cpp=True)


def as_int(node: DocNode, path: str, lo: int, hi: int, *, unsigned: bool) -> int:
    if node.kind != "scalar":
        raise _bad(node, path)
    m = _INT_RE.match(node.value)
    if m is None or (unsigned and m.group(1) == "-"):
        raise _bad(node, path)
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
        raise _bad(node, path)
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
    raise _bad(node, path)


def as_str(node: DocNode, path: str) -> str:
    if node.kind == "null":
        return "null"
    if node.kind != "scalar":
        raise _bad(node, path)
    return node.value


def as_char(node: DocNode, path: str) -> str:
    if node.kind != "scalar" or len(node.value.rstrip()) != 1 or node.value[0].isspace():
        raise _bad(node, path)
    return node.value[0]


def error_at(node: DocNode, path: str, reason: str) -> JobspecError:
    line = node.line + 1 if node.line is not None else None
    return JobspecError(path, reason, line=line, column=node.column)


def map_items(node: DocNode, path: str) -> Iterator[tuple[str, DocNode, str]]:
    """Iterate a mapping like yaml-cpp: nothing for scalars/null, an error for sequences."""
    if node.kind == "seq" and len(node):
        raise JobspecError(path, _INVALID_NODE, yaml_cpp=True)
    if node.kind != "map":
        return
    for k, v in node.value:
        key = as_str(k, path)
        yield key, v, join_path(path, key)



def to_python(node: DocNode) -> Any:
    """Plain Python for pass-through data (user attributes, unknown system keys)."""
    if node.kind == "null":
        return None
    if node.kind == "map":
        return {to_python(k): to_python(v) for k, v in node.value}
    if node.kind == "seq":
        return [to_python(v) for v in node.value]
    if node.py is not None:
        return node.py
    if node.quoted or not node.value:
        return node.value
    try:
        return yaml.load(node.value, Loader=_LOADER)  # _LOADER is a safe loader
    except yaml.YAMLError:
        return node.value
