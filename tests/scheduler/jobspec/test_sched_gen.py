"""bench/sched_gen.py writes graphs, jobspecs and command streams the scheduler can read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import networkx as nx
from fluxnode.scheduler.jobspec.jobspec import Jobspec
from support.paths import REPO

GEN = REPO / "bench" / "sched_gen.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GEN), *args], capture_output=True, text=True,
                          timeout=60)


def test_all(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    r = run("all", "--nodes", "8", "--racks", "2", "--gpus", "4", "--memory-gb", "256",
            "--jobs", "50", "--mix", "core=3,node=1,gang=1,gpu=1", "--cancel-lag", "10",
            "-o", str(out))
    assert r.returncode == 0, r.stderr
    recipe = nx.read_graphml(out / "graph.graphml")
    assert recipe.nodes["cluster"]["root"] == 1
    assert recipe.edges["rack", "node"]["multi_scale"] == 4
    assert recipe.edges["socket", "gpu"]["multi_scale"] == 2
    assert recipe.nodes["memory"]["size"] == 128
    kinds = {p.stem for p in (out / "jobspecs").glob("*.yaml")}
    assert kinds == {"core", "socket", "node", "gang", "gpu"}
    for path in (out / "jobspecs").glob("*.yaml"):
        js = Jobspec.parse(path.read_text())
        assert js.duration == 3600
    lines = (out / "cmds.in").read_text().splitlines()
    assert sum(line.startswith("match allocate_orelse_reserve /") for line in lines) == 50
    assert sum(line.startswith("cancel ") for line in lines) == 40
    assert lines[-1] == "quit"
    # deterministic for a seed
    again = tmp_path / "again"
    assert run("all", "--nodes", "8", "--racks", "2", "--gpus", "4", "--memory-gb", "256",
               "--jobs", "50", "--mix", "core=3,node=1,gang=1,gpu=1", "--cancel-lag", "10",
               "-o", str(again)).returncode == 0
    assert (again / "cmds.in").read_text() == (out / "cmds.in").read_text().replace(
        str(out.resolve()), str(again.resolve()))


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    r = run("grug", "--nodes", "3", "--racks", "2", "-o", str(tmp_path / "g.graphml"))
    assert r.returncode == 2
    assert r.stderr == "sched_gen.py: --nodes 3 does not spread evenly over --racks 2\n"
