"""Property test of resource-query's command language (issue 35): random command streams
never end a session with an exception, and the planners stay sound.

Streams mix matches of every verb (allocate, allocate_orelse_reserve,
allocate_with_satisfiability, satisfiability, without_allocating[_future], and
multi-match), cancels, partial cancels by rank (overlapping ones, and ranks a job does
not hold: Fluxion's half-failed partial cancel), status and property changes, finds, on
jobspecs with and without a duration, under every policy and a few prune filters. Each
command goes to ``Session.dispatch`` itself, not through the command loop that turns an
unexpected exception into an error line: any exception fails the example.

After every command the model checks what Fluxion's planner guarantees (planner.h: a
span fits its planner's free units, or planner_add_span fails): at each live job's start
no vertex's planner, x_checker or subtree filter has fewer than 0 or more than its total
units free, and every job the session lists as allocated or reserved is one the
traverser holds. Derandomized (support.fuzz.PROFILE), bounded in examples and stream
length so it runs in seconds.
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

from fluxnode.scheduler.resource_query.command import load_graph
from fluxnode.scheduler.resource_query.session import Session
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fuzz import EXAMPLES, PROFILE

NODES = 4
R = {"version": 1, "execution": {
    "R_lite": [{"rank": f"0-{NODES - 1}", "children": {"core": "0-3", "gpu": "0"}}],
    "nodelist": [f"n[0-{NODES - 1}]"], "properties": {"fast": "1-2"},
    "starttime": 0, "expiration": 0}}
POLICIES = ["first", "low", "high", "lonode", "hinode", "lonodex", "hinodex", "firstnodex",
            "locality", "variation"]
PRUNE = ["ALL:core,ALL:node", "ALL:core", "ALL:core,ALL:gpu", "cluster:core,node:core"]
VERBS = ["allocate", "allocate_orelse_reserve", "allocate_with_satisfiability",
         "satisfiability", "without_allocating", "without_allocating_future"]


def _jobspec(shape: str, a: int, b: int, duration: float | None, fast: bool) -> dict:
    slot = {"type": "slot", "count": a, "label": "s", "with": [{"type": "core", "count": b}]}
    if shape == "gpu":
        slot["with"].append({"type": "gpu", "count": 1})
    resources = [slot]
    if shape == "node":
        slot["with"] = [{"type": "node", "count": 1, "with": slot["with"]}]
    elif shape == "node-x":
        resources = [{"type": "node", "count": a, "exclusive": True,
                      "with": [dict(slot, count=1)]}]
    system: dict = {}
    if duration is not None:
        system["duration"] = duration
    if fast:
        system["constraints"] = {"properties": ["fast"]}
    return {"version": 9999, "resources": resources, "attributes": {"system": system},
            "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}


jobspecs = st.builds(
    _jobspec, st.sampled_from(["cores", "gpu", "node", "node-x"]), st.integers(1, 3),
    st.integers(1, 4), st.sampled_from([None, None, 1, 60, 3600, 0.5, 3153600000]),
    st.booleans())


def _ranks() -> st.SearchStrategy[str]:
    return st.tuples(st.integers(0, NODES - 1), st.integers(0, NODES - 1)).map(
        lambda t: f"{min(t)}-{max(t)}" if t[0] != t[1] else str(t[0]))


commands = st.one_of(
    st.tuples(st.just("match"), st.sampled_from(VERBS), st.integers(0, 3)),
    st.tuples(st.just("multi"), st.sampled_from(VERBS), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("cancel"), st.integers(1, 8)),
    st.tuples(st.just("pcancel"), st.integers(1, 8), _ranks()),
    st.tuples(st.just("status"), st.integers(0, NODES - 1), st.sampled_from(["up", "down"])),
    st.tuples(st.just("property"), st.integers(0, NODES - 1), st.sampled_from(["fast", "k"])),
    st.tuples(st.just("find"), st.sampled_from([
        "sched-now=allocated", "status=down or sched-future=reserved", "agfilter=t",
        "jobid-alloc=1 agfilter=t", "property=fast and status=up", "agfilter=false"])),
)


def _line(cmd: tuple, specs: list[Path], tmp: Path, k: int) -> str:
    kind = cmd[0]
    if kind == "match":
        return f"match {cmd[1]} {specs[cmd[2]]}"
    if kind == "multi":
        return f"multi-match {cmd[1]} {specs[cmd[2]]} {specs[cmd[3]]}"
    if kind == "cancel":
        return f"cancel {cmd[1]}"
    if kind == "pcancel":
        part = tmp / f"pc{k}.json"
        part.write_text(json.dumps({"version": 1, "execution": {
            "R_lite": [{"rank": cmd[2], "children": {"core": "0-3", "gpu": "0"}}],
            "nodelist": ["n0"], "starttime": 0, "expiration": 0}}))
        return f"partial-cancel {cmd[1]} rv1exec {part}"
    if kind == "status":
        return f"set-status /cluster0/n{cmd[1]} {cmd[2]}"
    if kind == "property":
        return f"set-property /cluster0/n{cmd[1]} {cmd[2]}=1"
    return f"find {cmd[1]}"


def _check_planners(session: Session, line: str) -> None:
    t = session.t
    starts = sorted({0} | {job.at for job in t.jobs.values()})
    for v in t.g.walk():
        for what, p in (("schedule", v.schedule), ("x_checker", v.x_checker)):
            if p is None:
                continue
            for at in starts:
                free = p.avail_resources_at(at)
                assert 0 <= free <= p.total, (line, v.path, what, at, free, p.total)
        sp = v.subplan
        if sp is not None:
            for at in starts:
                for rtype, free in sp.avail_resources_at(at).items():
                    total = sp.totals[rtype]
                    assert 0 <= free <= total, (line, v.path, "subplan", rtype, at, free)
    held = set(t.jobs)
    listed = set(session.allocations) | set(session.reservations)
    assert listed <= held, (line, listed - held)


@settings(PROFILE, max_examples=min(EXAMPLES, 60))
@given(policy=st.sampled_from(POLICIES), prune=st.sampled_from(PRUNE),
       specs=st.lists(jobspecs, min_size=4, max_size=4),
       stream=st.lists(commands, min_size=4, max_size=18))
def test_random_streams_never_raise_and_keep_the_planners_sound(policy, prune, specs, stream):
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        graph = tmp / "R.json"
        graph.write_text(json.dumps(R))
        paths = []
        for i, js in enumerate(specs):
            p = tmp / f"j{i}.json"
            p.write_text(json.dumps(js))
            paths.append(p)
        trav = FastTraverser(load_graph(str(graph), "rv1exec"), policy, prune_filters=prune)
        out, err = io.StringIO(), io.StringIO()
        session = Session(trav, "simple", out, err)
        for k, cmd in enumerate(stream):
            line = _line(cmd, paths, tmp, k)
            session.dispatch(line)  # an exception here is the failure
            _check_planners(session, line)
        assert "Traceback" not in err.getvalue()
