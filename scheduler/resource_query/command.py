"""The ``fluxnode resource-query`` command: options, graph loading, the command loop.

Parses Fluxion's resource-query options, with its long and short names (``-L FILE
-f grug|jgf|jgf_shorthand|rv1exec|rv1exec_force|hwloc``, ``-P policy``, ``-F format``,
``-T/--traverser-policy simple|flexible``, ``-g``/``-o``...), loads the graph, builds
the traverser and feeds stdin's lines to a :class:`Session`. Bad options or
input are one ``ERROR:`` line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import TextIO

import click
from fluxnode.broker_conf.rv1 import RError
from fluxnode.scheduler import writers
from fluxnode.scheduler.graph.resource_graph import ResourceGraph
from fluxnode.scheduler.policies.policy import PolicyError
from fluxnode.scheduler.readers.grug import GrugError, read_grug
from fluxnode.scheduler.readers.hwloc import HwlocError, read_hwloc
from fluxnode.scheduler.readers.jgf import JgfError, JgfFetchError, read_jgf
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.resource_query.session import HELP, Session
from fluxnode.scheduler.resource_query.subsystems import (
    CONTAINMENT,
    NO_ROOT_STDERR,
    UNKNOWN_NAME_EXIT,
    UNKNOWN_NAME_STDERR,
    UnknownSubsystems,
    missing_roots,
    subsystems_of,
)
from fluxnode.scheduler.traversers.dfu import DEFAULT_PRUNE_FILTERS, TraverserError
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from fluxnode.scheduler.traversers.flexible import FlexibleTraverser
from fluxnode.scheduler.traversers.match_errors import ABORT_EXIT, FluxionAbort

# -f: Fluxion's known_resource_reader; jgf_shorthand reads a whole graph as jgf does, and
# rv1exec_force is the rv1exec reader (resource_reader_factory.cpp)
LOAD_FORMATS = ("grug", "hwloc", "jgf", "jgf_shorthand", "rv1exec", "rv1exec_force")
# -g: string_to_graph_format, any case
GRAPH_FORMATS = ("dot", "graphml")


def load_graph(path: str, fmt: str, allowlist: list[str] | None = None) -> ResourceGraph:
    if fmt == "grug":
        return read_grug(path)
    if fmt in ("jgf", "jgf_shorthand"):
        return read_jgf(path)
    if fmt in ("rv1exec", "rv1exec_force"):
        try:
            R = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RError(f"cannot read {path}: {exc}") from exc
        return read_rv1(R)
    if fmt == "hwloc":
        return read_hwloc(path, allowlist)
    raise ValueError(f"unknown load format {fmt}")


class _Console:
    """Standard output as Fluxion's ``std::cout`` leaves it when the program aborts: a
    line it ends with ``std::endl`` is flushed, one ended with ``"\n"`` waits in the
    buffer for the next flush, and an abort() loses it. ``hold`` keeps such lines until
    the next write (or the end of the session, ``release``); ``drop`` loses them."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.held = ""

    def hold(self, text: str) -> None:
        self.held += text

    def write(self, text: str) -> int:
        self.release()
        return self.stream.write(text)

    def release(self) -> None:
        if self.held:
            self.stream.write(self.held)
            self.held = ""

    def drop(self) -> None:
        self.held = ""

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def _write_load_info(stdout: _Console, graph: ResourceGraph, elapse: float) -> None:
    """-e after loading, as Fluxion's print_elapse_time: the time (a C++ stream's default
    6 significant digits), the graph's size and its lookup tables' sizes; the lines per
    rank end in "\n", not std::endl, so they are held (see _Console)."""
    edges = 0
    for v in graph.vertices:
        edges += len(v.children)
        if v.aux_children:
            edges += sum(len(kids) for kids in v.aux_children.values())
    stdout.write(f"INFO: Graph Load Time: {elapse:g}\n")
    stdout.write(f"INFO: Vertex Count: {len(graph.vertices)}\n")
    stdout.write(f"INFO: Edge Count: {edges}\n")
    stdout.write(f"INFO: by_type Key-Value Pairs: {len(graph.by_type)}\n")
    stdout.write(f"INFO: by_name Key-Value Pairs: {len(graph.by_name)}\n")
    stdout.write(f"INFO: by_path Key-Value Pairs: {graph.path_count()}\n")
    for rank in sorted(graph.by_rank):
        stdout.hold(f"INFO: number of vertices with rank {rank}: {len(graph.by_rank[rank])}\n")


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or bare stream
        return False


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="resource-query", add_help=False)
    p.add_argument("-L", "--load-file")
    p.add_argument("-f", "--load-format", default="grug")
    p.add_argument("-W", "--load-allowlist")
    p.add_argument("-S", "--match-subsystems", default="CA")
    p.add_argument("-P", "--match-policy", default="first")
    p.add_argument("-F", "--match-format", default="simple")
    # Fluxion's getopt table (resource-query.cpp): -g names the format of the graph file
    # -o names; its main never writes that file, so both are checked and kept only
    p.add_argument("-g", "--graph-format")
    p.add_argument("-o", "--graph-output")
    # Fluxion's resource-query joins every -p with "," and ignores one of spaces only,
    # so `--prune-filters=` keeps the default filters
    p.add_argument("-p", "--prune-filters", action="append", default=[])
    p.add_argument("-t", "--test-output")
    p.add_argument("-r", "--reserve-vtx-vec")
    p.add_argument("-T", "--traverser-policy", dest="traverser", default="simple")
    p.add_argument("-e", "--elapse-time", action="store_true")
    p.add_argument("-d", "--disable-prompt", action="store_true")
    p.add_argument("-h", "--help", action="store_true")
    return p


def run(argv: list[str], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    try:
        ns, extra = _parser().parse_known_args(argv)
    except SystemExit:
        return 1
    if ns.help:
        stdout.write(HELP)
        return 0
    if extra:
        stderr.write(f"ERROR: unknown option {extra[0]}\n")
        return 1
    # what process_args refuses, in its words (before its usage text)
    if ns.match_format not in writers.FORMATS:
        stderr.write(f"[ERROR] unknown format for --match-format: {ns.match_format}\n")
        return 1
    if ns.load_format not in LOAD_FORMATS:
        stderr.write(f"[ERROR] unknown format for --load-format: {ns.load_format}\n")
        return 1
    if ns.graph_format is not None and ns.graph_format.lower() not in GRAPH_FORMATS:
        stderr.write(f"[ERROR] unknown format for --graph-format: {ns.graph_format}\n")
        return 1
    if not ns.load_file:
        stderr.write("ERROR: -L/--load-file is required\n")
        return 1
    allow = [t for t in (ns.load_allowlist or "").split(",") if t]
    t0 = time.perf_counter()  # -e's Graph Load Time: the graph read and the traverser made
    try:
        graph = load_graph(ns.load_file, ns.load_format, allow)
    except JgfFetchError as exc:
        # resource_query_t's constructor throws the reader's message (which ends in a
        # newline); resource-query's main prints it, then its own line
        stderr.write(f": Runtime error: resource_query_t: ERROR: {exc}\n\n"
                     "ERROR: error generating resources\n\n")
        return 1
    except (GrugError, JgfError, RError, HwlocError, OSError, ValueError) as exc:
        stderr.write(f"ERROR: can't load {ns.load_file}: {exc}\n")
        return 1
    try:
        subsystems = subsystems_of(ns.match_subsystems)
    except UnknownSubsystems:
        stderr.write(UNKNOWN_NAME_STDERR)
        return UNKNOWN_NAME_EXIT
    if missing_roots(subsystems, graph.roots):
        stderr.write(NO_ROOT_STDERR)
        return 1
    whole = graph  # what Fluxion loaded, all subsystems (-e counts it)
    if subsystems[0] != CONTAINMENT:
        # the matcher walks the dominant subsystem as its containment tree; under a
        # containment dominant one it also walks the auxiliary ones' edges (aux_walk)
        graph = graph.project(subsystems[0])
    if ns.traverser not in ("simple", "flexible"):
        stderr.write(f"ERROR: unknown traverser {ns.traverser}\n")
        return 1
    cls = FlexibleTraverser if ns.traverser == "flexible" else FastTraverser
    given = [f for f in ns.prune_filters if f.strip(" ")]
    prune = ",".join(given) if given else DEFAULT_PRUNE_FILTERS
    try:
        trav = cls(graph, ns.match_policy, prune_filters=prune, subsystems=list(subsystems),
                   loaded=whole if whole is not graph else None)
    except PolicyError as exc:
        stderr.write(f"ERROR: unknown match policy {ns.match_policy}: {exc}\n")
        return 1
    except TraverserError as exc:
        stderr.write(f"ERROR: {exc}\n")
        return 1
    console = _Console(stdout)
    if ns.elapse_time:
        _write_load_info(console, whole, time.perf_counter() - t0)
    out: TextIO = console  # type: ignore[assignment] - a TextIO's write and the rest
    outfile = None
    if ns.test_output:
        try:
            # line buffered: Fluxion's -t stream is flushed at every std::endl, which
            # places what a script appends to the same file (2>> FILE) where Fluxion's
            # run places it
            outfile = open(ns.test_output, "w", buffering=1)  # noqa: SIM115 - closed below
        except OSError as exc:
            stderr.write(f"ERROR: can't open {ns.test_output}: {exc.strerror}\n")
            return 1
        out = outfile
    session = Session(trav, ns.match_format, out, stderr, ns.elapse_time,
                      console=console)  # type: ignore[arg-type]
    # editline's readline writes its prompt only to a terminal: with commands piped in,
    # Fluxion's resource-query writes none, -d or not
    prompt = not ns.disable_prompt and _is_terminal(stdin)
    # the commands that print (stat, info...) write through the console too, so what it
    # holds goes out first, as Fluxion's std::endl flushes what std::cout held before
    with contextlib.redirect_stdout(console):  # type: ignore[type-var]
        return _loop(session, console, stdin, stderr, prompt, outfile)


def _loop(session: Session, console: _Console, stdin: TextIO, stderr: TextIO, prompt: bool,
          outfile: TextIO | None) -> int:
    """Feed stdin's lines to ``session`` until ``quit`` or the end of input."""
    try:
        while True:
            if prompt:
                console.write("resource-query> ")
                console.flush()
            line = stdin.readline()
            if not line:
                break
            try:
                if not session.dispatch(line):
                    break
            except FluxionAbort as exc:
                # where Fluxion's resource-query aborts (an exception its C++ does not
                # catch), it ends here the same way, what its stdout held unflushed lost
                console.drop()
                stderr.write(exc.stderr)
                return ABORT_EXIT
            except Exception as exc:  # noqa: BLE001 - no input may end the session
                # as Fluxion's: one command's error is printed, the session goes on; the
                # errors each command expects are its own lines (session.py), this is the
                # net under them (an error of ours, named so it can be reported)
                if isinstance(exc, (ValueError, TypeError, KeyError, OverflowError,
                                    RecursionError)):
                    stderr.write(f"ERROR: {exc}\n")
                else:
                    stderr.write(f"ERROR: {line.split()[0]}: {type(exc).__name__}: {exc}\n")
    finally:
        if outfile is not None:
            outfile.close()
    console.release()
    return 0


@click.command(
    "resource-query",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                      "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def main(args: tuple[str, ...]) -> None:
    """Fluxion's resource-query: match jobspecs on a graph.

    Loads a graph and runs match, cancel, find... commands from stdin, with Fluxion's
    options and output (-h lists them).
    """
    try:
        rc = run(list(args), sys.stdin, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        rc = 130
    except RecursionError:
        sys.stderr.write("ERROR: resource graph too deep\n")
        rc = 1
    sys.exit(rc)
