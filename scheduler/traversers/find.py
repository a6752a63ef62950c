"""``find`` expressions (Fluxion's expr_eval): which vertices match predicates.

Grammar: predicates ``key=value`` joined by ``and`` / ``or`` (juxtaposition means and)
with parentheses. As Fluxion's expr_eval_api evaluates them, the operators have one
precedence and apply left to right (``a or b and c`` is ``(a or b) and c``). Keys:
``status``, ``sched-now``, ``sched-future``, ``jobid-alloc``, ``jobid-span``,
``jobid-tag``, ``jobid-reserved``, ``agfilter``, ``property``, ``names``; every value is
checked before anything is walked (expr_eval_vtx_target_t::validate), so an invalid one
is an error, not an empty answer. ``agfilter=true`` is true of every vertex and asks for
the subtree filters' counts, ``agfilter=false`` is false of every vertex; the last
``agfilter`` and the last ``jobid-*`` predicate of the expression are the ones the walk
uses (dfu_impl_t::find).

The walk returns the emitted vertices with the edges it wrote (:class:`Found`): as
dom_find_dfv, an edge from a vertex to each child that was emitted, written right after
that child's subtree, whether or not the vertex itself is then emitted. Under
``agfilter=true`` a vertex without a subtree filter (or, for a job id, without that
job's span in it) is not emitted even when children below it are: its children's edges
are written, the edge into it is not.
"""

from __future__ import annotations

import functools
import re

from fluxnode.broker_conf import hostlist
from fluxnode.scheduler.traversers.dfu_impl import Emit

KEYS = ("status", "sched-now", "sched-future", "jobid-alloc", "jobid-span", "jobid-tag",
        "jobid-reserved", "agfilter", "property", "names")


class FindError(ValueError):
    pass


def _tokens(expr: str) -> list[str]:
    return re.findall(r"\(|\)|[^\s()]+", expr)


def _parse(tokens: list[str]):
    pos = 0

    def primary():
        nonlocal pos
        if pos >= len(tokens):
            raise FindError("find: invalid criteria")
        tok = tokens[pos]
        if tok == "(":
            pos += 1
            node = orexpr()
            if pos >= len(tokens) or tokens[pos] != ")":
                raise FindError("find: unbalanced parentheses")
            pos += 1
            return node
        key, sep, value = tok.partition("=")
        if not sep or key not in KEYS or not _valid(key, value):
            raise FindError(f"find: invalid criteria: {tok}")
        pos += 1
        return ("pred", key, value)

    def orexpr():  # left to right, one precedence (expr_eval_api_t::evaluate)
        nonlocal pos
        node = primary()
        while pos < len(tokens) and tokens[pos] != ")":
            op = "and"
            if tokens[pos] in ("and", "or"):
                op = tokens[pos]
                pos += 1
            node = (op, node, primary())
        return node

    tree = orexpr()
    if pos != len(tokens):
        raise FindError("find: invalid criteria")
    return tree


def _valid(key: str, value: str) -> bool:
    """expr_eval_vtx_target_t::validate: is ``value`` one ``key`` takes?"""
    lv = value.lower()
    if key == "status":
        return lv in ("down", "up")
    if key == "sched-now":
        return lv in ("allocated", "free")
    if key == "sched-future":
        return lv in ("reserved", "free")
    if key == "agfilter":
        return lv in ("true", "t", "false", "f")
    if key.startswith("jobid-"):
        return _jobid(value) is not None
    if key == "names":
        try:
            _matcher(lv)  # read, never expanded: n[0-99999999] costs what its text does
        except ValueError:
            return False
        return True
    return bool(value)  # property


_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _jobid(value: str) -> int | None:
    """A job id as flux_job_id_parse reads it (flux-core's libjob/id.c, libutil/fluid.c):
    a ``job.`` prefix dropped; then dothex (any ``.``: four groups of 1-4 hex digits),
    mnemonic words (any ``-``: not decoded here, None), F58 (``f`` or ``ƒ``, 1-12 base58
    digits, summed in 64 bits), else strtoull's decimal (an optional ``+``) or ``0x``
    hex, under 2**64. None when it is not one."""
    v = value.lstrip()
    v = v[4:] if v.startswith("job.") else v
    if "." in v:
        m = re.fullmatch(r"([0-9a-fA-F]{1,4})\.([0-9a-fA-F]{1,4})\.([0-9a-fA-F]{1,4})\."
                         r"([0-9a-fA-F]{1,4})", v)
        if m is None:
            return None
        return sum(int(g, 16) << (48 - 16 * i) for i, g in enumerate(m.groups()))
    if "-" in v:
        return None
    if v[:1] in ("f", "ƒ"):
        digits = v[1:]
        if not digits or len(digits.encode()) > 12 or any(c not in _B58 for c in digits):
            return None
        return sum(_B58.index(c) * 58 ** i for i, c in enumerate(reversed(digits))) % 2**64
    v = v.rstrip()
    if re.fullmatch(r"0x[0-9a-fA-F]+", v):
        n = int(v[2:], 16)
    elif re.fullmatch(r"\+?[0-9]+", v):
        n = int(v)
    else:
        return None
    return n if n < 2**64 else None


def _eval(node, v, ov) -> bool:
    """``ov`` = (down, allocated, reserved) inherited from ancestors (Fluxion's overrides)."""
    if node[0] == "and":
        return _eval(node[1], v, ov) and _eval(node[2], v, ov)
    if node[0] == "or":
        return _eval(node[1], v, ov) or _eval(node[2], v, ov)
    _, key, value = node
    lv = value.lower()
    if key == "status":
        return ("down" if ov[0] else "up") == lv
    if key == "sched-now":
        return ov[1] == (lv == "allocated")
    if key == "sched-future":
        return ov[2] == (lv == "reserved")
    if key == "agfilter":
        return lv in ("true", "t")
    jid = _jobid(value)
    if key == "jobid-alloc":
        return jid in v.allocations
    if key == "jobid-reserved":
        return jid in v.reservations
    if key == "jobid-span":  # the job's span in this vertex's subtree filter (Fluxion's job2span)
        return jid in v.agspans
    if key == "jobid-tag":
        return jid in v.tags
    if key == "property":  # the property's name, lower-cased, is looked up as it is
        return lv in v.properties
    if key == "names":  # matched lower-cased, as hostlist_decode (lcx) reads it
        return v.name in _matcher(lv)
    return False


@functools.lru_cache(maxsize=64)
def _matcher(value: str) -> hostlist.Matcher:
    """A names= hostlist, read once per expression (not per vertex) and never expanded."""
    return hostlist.Matcher(value)


def _preds(node, out: list) -> list:
    """The predicates in expression order (expr_eval_api_t::extract)."""
    if node[0] == "pred":
        out.append((node[1], node[2]))
    else:
        _preds(node[1], out)
        _preds(node[2], out)
    return out


class Found(list):
    """find's emits (Emit, post-order) and ``edges``: (parent, child) vertices in the
    order dom_find_dfv's emit_edg writes them."""

    def __init__(self) -> None:
        super().__init__()
        self.edges: list = []


def find(traverser, criteria: str) -> Found:
    tree = _parse(_tokens(criteria))
    agfilter = False
    jobid = None
    for key, value in _preds(tree, []):  # the last of each kind wins
        if key == "agfilter":
            agfilter = value.lower() in ("true", "t")
        elif key.startswith("jobid-"):
            jobid = _jobid(value)
    out = Found()

    def rec(v, level, ov) -> int:
        ov = (ov[0] or v.status == "down", ov[1] or bool(v.allocations),
              ov[2] or bool(v.reservations))
        n = 0
        for c in v.children:
            got = rec(c, level + 1, ov)
            if got:
                out.edges.append((v, c))
            n += got
        if not (_eval(tree, v, ov) or n):
            return 0
        extra = None
        if agfilter:
            # a job id of 0 (or none) asks for the totals; another, the job's span
            if jobid and jobid not in v.agspans:
                return 0
            extra = traverser.agfilter(v, jobid or None)
            if extra is None:
                return 0
        out.append(Emit(v, v.size, True, level, extra))
        return n + 1

    # Fluxion's find walk starts at the traversal level updates left (dfu_update._update)
    rec(traverser.g.root, 1 + getattr(traverser, "level_leak", 0), (False, False, False))
    return out
