"""``fluxnode resource-query``: Fluxion's resource-query, command for command.

Loads a graph (``-L FILE``, ``-f grug|jgf|rv1exec|hwloc``), then reads commands
(``match allocate JOBSPEC``, ``cancel``, ``find``, ``set-status`` ...) from stdin
and writes exactly what Fluxion's resource-query writes to the ``-t`` file;
errors go to stderr as ``ERROR: ...`` lines, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

import click
from fluxnode.broker_conf import idset
from fluxnode.scheduler import writers
from fluxnode.scheduler.graph.resource_graph import ResourceGraph
from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError
from fluxnode.scheduler.policies.policy import PolicyError
from fluxnode.scheduler.readers.grug import GrugError, read_grug
from fluxnode.scheduler.readers.hwloc import HwlocError, read_hwloc
from fluxnode.scheduler.readers.jgf import JgfError, add_jgf, load_jgf_document, read_jgf
from fluxnode.scheduler.readers.rv1 import RError, ranks_in_R, read_rv1
from fluxnode.scheduler.traversers.dfu import (
    DEFAULT_PRUNE_FILTERS,
    NoMatch,
    Traverser,
    TraverserError,
    Unsatisfiable,
)
from fluxnode.scheduler.traversers.find import FindError, find
from fluxnode.scheduler.traversers.flexible import FlexibleTraverser

SEP = "INFO: =============================\n"
HELP = """Usage: resource-query [OPTIONS...]
  -L, --load-file=FILE  -f, --load-format=grug|jgf|rv1exec|hwloc
  -S, --match-subsystems=CA  -P, --match-policy=POLICY  -F, --match-format=FORMAT
  -t, --test-output=FILE  -e, --elapse-time  -d, --disable-prompt
  -p, --prune-filters=SPEC  -W, --load-allowlist=TYPES  -r, --reserve-vtx-vec=N
  -T, --traverser=simple|flexible  -o, --graph-format=FORMAT  -h, --help
"""


def load_graph(path: str, fmt: str, allowlist: list[str] | None = None) -> ResourceGraph:
    if fmt == "grug":
        return read_grug(path)
    if fmt in ("jgf",):
        return read_jgf(path)
    if fmt == "rv1exec":
        try:
            R = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RError(f"cannot read {path}: {exc}") from exc
        return read_rv1(R)
    if fmt == "hwloc":
        return read_hwloc(path, allowlist)
    raise ValueError(f"unknown load format {fmt}")


class Session:
    def __init__(self, traverser: Traverser, fmt: str, out: TextIO, err: TextIO,
                 elapse: bool = False) -> None:
        self.t = traverser
        self.fmt = fmt
        self.out = out
        self.err = err
        self.elapse = elapse
        self.jobid = 1
        self.allocations: dict[int, int] = {}
        self.reservations: dict[int, int] = {}
        self.jobinfo: dict[int, tuple[str, int, str]] = {}

    # -- output -----------------------------------------------------------
    def emit(self, result) -> None:
        if self.fmt == "simple":
            self.out.write(writers.simple(result))
        elif self.fmt == "pretty_simple":
            self.out.write(writers.pretty_simple(result))
        elif self.fmt == "jgf":
            self.out.write(writers.dumps(writers.jgf(result)) + "\n")
        elif self.fmt == "rlite":
            self.out.write(writers.dumps({"R_lite": writers.rlite(result)}) + "\n")
        elif self.fmt == "rv1":
            self.out.write(writers.dumps(writers.rv1(result)) + "\n")
        elif self.fmt == "rv1_nosched":
            self.out.write(writers.dumps(writers.rv1_nosched(result)) + "\n")

    def error(self, msg: str) -> None:
        self.err.write(msg + "\n")

    # -- commands ---------------------------------------------------------
    def run_match(self, op: str, fn: str) -> bool:
        jobid = self.jobid
        try:
            text = Path(fn).read_text()
        except OSError:
            self.error(f"ERROR: can't open {fn}")
            return True
        if op != "satisfiability":
            self.jobid += 1
        matched, sat, result = True, True, None
        try:
            js = Jobspec.parse(text)
            result = self.t.match(js, op=op, jobid=jobid)
        except Unsatisfiable:
            matched, sat = False, False
        except NoMatch:
            matched = False
        except JobspecError as exc:
            self.error(f"ERROR: Jobspec error for {jobid}: {exc.what if hasattr(exc, 'what') else exc}")
            matched = False
        except TraverserError as exc:
            self.error(f"ERROR: {exc}")
            matched = False
        if op == "satisfiability":
            self.out.write(SEP)
            self.out.write(f"INFO: {'Satisfiable' if matched else 'Unsatisfiable'} request\n")
            self.out.write(SEP)
            return matched
        if matched:
            self._placed(jobid, result, fn)
        else:
            self._not_placed(jobid, sat)
        return matched

    def _placed(self, jobid: int, result, fn: str) -> None:
        """Write a placed job (a match's or an update's) and remember it."""
        self.emit(result)
        self.out.write(SEP)
        self.out.write(f"INFO: JOBID={jobid}\n")
        at = result.at
        self.out.write(f"INFO: RESOURCES={'ALLOCATED' if at == 0 else 'RESERVED'}\n")
        self.out.write(f"INFO: SCHEDULED AT={'Now' if at == 0 else at}\n")
        self.out.write(SEP)
        (self.allocations if at == 0 else self.reservations)[jobid] = jobid
        self.jobinfo[jobid] = ("ALLOCATED" if at == 0 else "RESERVED", at, fn)

    def _not_placed(self, jobid: int, satisfiable: bool = True) -> None:
        self.out.write(SEP)
        self.out.write("INFO: No matching resources found\n")
        if not satisfiable:
            self.out.write("INFO: Unsatisfiable request\n")
        self.out.write(f"INFO: JOBID={jobid}\n")
        self.out.write(SEP)

    OPS = ("allocate", "allocate_orelse_reserve", "allocate_with_satisfiability",
           "satisfiability")

    def cmd_match(self, args: list[str]) -> None:
        if len(args) != 3:
            return self.error("ERROR: malformed command")
        if args[1] not in self.OPS:
            return self.error(f"ERROR: unknown subcmd {args[1]}")
        self.run_match(args[1], args[2])

    def cmd_multi_match(self, args: list[str]) -> None:
        if len(args) <= 3:
            return self.error("ERROR: malformed command")
        if args[1] not in self.OPS:
            return self.error(f"ERROR: unknown subcmd {args[1]}")
        for fn in args[2:]:
            if not self.run_match(args[1], fn):
                break

    def _jobid(self, s: str) -> int:
        try:
            return int(s)
        except ValueError:
            return 0

    def cmd_cancel(self, args: list[str]) -> None:
        if len(args) < 2 or len(args) > 3:
            return self.error("ERROR: malformed command")
        jobid = self._jobid(args[1])
        if jobid in self.allocations or jobid in self.reservations:
            try:
                self.t.cancel(jobid)
            except TraverserError:
                self.error(f"ERROR: error encountered while removing job {jobid}")
            self.allocations.pop(jobid, None)
            self.reservations.pop(jobid, None)
            if jobid in self.jobinfo:
                self.jobinfo[jobid] = ("CANCELED",) + self.jobinfo[jobid][1:]
        else:
            return self.error(f"ERROR: nonexistent job {jobid}")
        if len(args) == 3 and args[2] == "stats":
            self._write_visit_counts("CANCEL")

    def _write_visit_counts(self, what: str) -> None:
        self.out.write(SEP)
        self.out.write(f'INFO: {what} PREORDER COUNT="{self.t.total_preorder}"\n')
        self.out.write(f'INFO: {what} POSTORDER COUNT="{self.t.total_postorder}"\n')
        self.out.write(SEP)

    def cmd_partial_cancel(self, args: list[str]) -> None:
        if len(args) < 4 or len(args) > 5:
            return self.error("ERROR: malformed command")
        jobid = self._jobid(args[1])
        reader = args[2]
        if reader not in ("jgf", "rv1exec"):
            return self.error(f"ERROR: unsupported reader {reader}")
        try:
            text = Path(args[3]).read_text()
        except OSError:
            return self.error(f"ERROR: can't open {args[3]}")
        if jobid in self.allocations:
            try:
                doc = json.loads(text)
                if reader == "rv1exec":
                    ranks = ranks_in_R(doc)
                else:
                    ranks = self._jgf_ranks(doc)
                full = self.t.partial_cancel(jobid, ranks)
                if full:
                    self.allocations.pop(jobid, None)
            except (ValueError, KeyError, TypeError, RError, TraverserError):
                self.error(f"ERROR: error encountered while removing job {jobid}")
        elif jobid in self.reservations:
            return self.error("ERROR: reservations not currently supported by partial cancel")
        else:
            return self.error(f"ERROR: nonexistent job {jobid}")
        if len(args) == 5 and args[4] == "stats":
            self._write_visit_counts("PARTIAL CANCEL")

    def _jgf_ranks(self, doc: dict) -> list[int]:
        """The ranks a partial-cancel JGF names. Every vertex must carry the rank the
        graph's vertex at its path has (Fluxion refuses the whole release otherwise,
        so nothing is freed on a bad document)."""
        ranks = set()
        for n in doc["graph"]["nodes"]:
            meta = n["metadata"]
            rank = int(meta.get("rank", -1))
            path = (meta.get("paths") or {}).get("containment")
            known = self.t.g.lookup(path) if path else []
            if rank < 0 or (known and known[0].rank != rank):
                raise ValueError(f"vertex {path or meta.get('name')} has rank {rank}")
            ranks.add(rank)
        return sorted(ranks)

    def cmd_find(self, args: list[str]) -> None:
        if len(args) < 2:
            return self.error("ERROR: malformed command: ")
        criteria = " ".join(args[1:])
        try:
            sel = find(self.t, criteria)
        except FindError as exc:
            return self.error(f"ERROR: {exc}")
        if sel or self.fmt in ("simple", "pretty_simple"):
            self.emit(sel)
        self.out.write(SEP)
        self.out.write(f'INFO: EXPRESSION="{criteria}"\n')
        self.out.write(SEP)

    def cmd_set_property(self, args: list[str]) -> None:
        if len(args) != 3:
            return self.error("ERROR: malformed command")
        pos = args[2].find("=")
        if pos in (0, -1, len(args[2]) - 1):
            self.out.write("Incorrect input format. \n"
                           "Please use `set-property <resource> PROPERTY=VALUE`.\n")
            return
        vs = self.t.g.lookup(args[1])
        if not vs:
            self.out.write(f"Couldn't find path {args[1]} in resource graph.\n")
            return
        for v in vs:
            v.set_property(args[2][:pos], args[2][pos + 1:])

    def cmd_get_property(self, args: list[str]) -> None:
        if len(args) != 2:
            return self.error("ERROR: malformed command")
        vs = self.t.g.lookup(args[1])
        if not vs:
            self.out.write(f"Could not find path {args[1]} in resource graph.\n")
            return
        for v in vs:
            if not v.properties:
                self.out.write(f"No properties were found for {args[1]} "
                               f"(vtx's uniq_id={v.uniq_id}).\n")
            for k in sorted(v.properties):
                self.out.write(f"{k}={v.properties[k]}\n")

    def cmd_set_status(self, args: list[str]) -> None:
        if len(args) != 3:
            return self.error("ERROR: malformed command")
        if not self.t.g.lookup(args[1]):
            self.out.write(f"Could not find path {args[1]} in resource graph.\n")
            return
        if args[2] not in ("up", "down"):
            return self.error("ERROR: unrecognized status")
        self.t.set_status(args[1], args[2])

    def cmd_get_status(self, args: list[str]) -> None:
        if len(args) != 2:
            return self.error("ERROR: malformed command")
        vs = self.t.g.lookup(args[1])
        if not vs:
            self.out.write(f"Could not find path {args[1]} in resource graph.\n")
            return
        for v in vs:
            self.out.write(f"{args[1]} is {v.status}\n")

    def cmd_info(self, args: list[str]) -> None:
        if len(args) != 2:
            return self.error("ERROR: malformed command")
        jobid = self._jobid(args[1])
        info = self.jobinfo.get(jobid)
        if info is None:
            return self.error(f"ERROR: jobid doesn't exist: {args[1]}")
        print(f"INFO: {jobid}, {info[0]}, {info[1]}, {info[2]}, 0.000000")

    def cmd_list(self, args: list[str]) -> None:
        for jobid, info in self.jobinfo.items():
            print(f"INFO: {jobid}, {info[0]}, {info[1]}, {info[2]}, 0.000000")

    def cmd_stat(self, args: list[str]) -> None:
        g = self.t.g
        print(f"INFO: Num. of Vertices: {sum(1 for _ in g.walk())}")
        print(f"INFO: Num. of Jobs Matched: {len(self.jobinfo)}")

    def cmd_cat(self, args: list[str]) -> None:
        if len(args) != 2:
            return self.error("ERROR: malformed command")
        try:
            sys.stdout.write(Path(args[1]).read_text())
        except OSError:
            self.error(f"ERROR: can't open {args[1]}")

    def cmd_help(self, args: list[str]) -> None:
        sys.stdout.write(HELP)

    def cmd_update(self, args: list[str]) -> None:
        """``update allocate|reserve jgf|rv1exec FILE JOBID STARTTIME DURATION``: replay an
        allocation (what a match wrote as JGF or R) as job JOBID, written like a match."""
        if len(args) != 7 or args[1] not in ("allocate", "reserve") \
                or args[2] not in ("jgf", "rv1exec"):
            return self.error("ERROR: malformed command")
        fn = args[3]
        try:
            jobid, at, duration = int(args[4]), int(args[5]), int(args[6])
        except ValueError:
            return self.error("ERROR: malformed command")
        if jobid in self.t.jobs:
            return self.error(f"ERROR: existent job {jobid}")
        try:
            doc = json.loads(Path(fn).read_text())
        except OSError:
            return self.error(f"ERROR: can't open {fn}")
        except ValueError as exc:
            return self.error(f"ERROR: {fn} is not JSON: {exc}")
        self.jobid = max(self.jobid, jobid + 1)
        try:
            picks = self._jgf_picks(doc) if args[2] == "jgf" else self._rv1exec_picks(doc)
            # like a match's answer, a job that starts now is allocated, later reserved
            result = self.t.replay(picks, jobid, at, duration, reserve=at != 0)
        except (ValueError, TraverserError) as exc:
            self.error(f"ERROR: update of job {jobid} failed: {exc}")
            return self._not_placed(jobid)
        self._placed(jobid, result, fn)

    def _rv1exec_picks(self, doc: dict) -> list[tuple]:
        """(vertex, units, exclusive) for an R: the listed children of each rank's node
        exclusively and whole; the node itself exclusively when all of it is listed;
        what lies between and above shared."""
        try:
            entries = doc["execution"]["R_lite"]
            ranked = [(idset.decode(str(e["rank"])), e.get("children", {})) for e in entries]
        except (KeyError, TypeError, ValueError) as exc:  # IdsetError is a ValueError
            raise ValueError(f"execution.R_lite: {exc}") from None
        picks: dict[int, tuple] = {}

        def share_up(v) -> None:
            while v is not None and v.uniq_id not in picks:
                picks[v.uniq_id] = (v, 1, False)
                v = v.parent

        for ranks, children in ranked:
            if not isinstance(children, dict):
                raise ValueError(f"R_lite children must be a mapping, not {children!r}")
            for rank in ranks:
                nodes = [v for v in self.t.g.by_rank.get(rank, []) if v.type == "node"]
                if not nodes:
                    raise ValueError(f"no node of rank {rank}")
                node = nodes[0]
                share_up(node)
                below = {}
                for v in self.t.g.walk(node):
                    if v is not node:
                        below.setdefault((v.type, v.id), v)
                for rtype, ids in children.items():
                    try:
                        wanted = idset.decode(str(ids))
                    except ValueError as exc:
                        raise ValueError(f"rank {rank} {rtype}: {exc}") from None
                    for i in wanted:
                        v = below.get((rtype, i))
                        if v is None:
                            raise ValueError(f"no {rtype}{i} on rank {rank}")
                        share_up(v.parent)
                        picks[v.uniq_id] = (v, v.size, True)
                if all(v.uniq_id in picks for v in below.values()):
                    picks[node.uniq_id] = (node, 1, True)  # the whole node
        return list(picks.values())

    def _jgf_picks(self, doc: dict) -> list[tuple]:
        """(vertex, units, exclusive) for each vertex of a match's JGF, found by path."""
        try:
            nodes = doc["graph"]["nodes"]
        except (KeyError, TypeError):
            raise ValueError("no graph.nodes in the JGF") from None
        picks = []
        for n in nodes:
            md = n.get("metadata", {}) if isinstance(n, dict) else {}
            path = md.get("paths", {}).get("containment") if isinstance(md, dict) else None
            if not isinstance(path, str):
                raise ValueError(f"JGF vertex {n.get('id') if isinstance(n, dict) else n!r} "
                                 "has no containment path")
            found = self.t.g.lookup(path)
            if not found:
                raise ValueError(f"no vertex at {path}")
            size, excl = md.get("size", 1), md.get("exclusive", False)
            if not isinstance(size, int) or not isinstance(excl, bool):
                raise ValueError(f"{path}: bad size {size!r} or exclusive {excl!r}")
            picks.append((found[0], size, excl))
        return picks

    def cmd_attach(self, args: list[str]) -> None:
        if len(args) != 2:
            return self.error("ERROR: malformed command")
        try:
            add_jgf(self.t.g, load_jgf_document(args[1]))
            self.t.reinit()
        except (JgfError, OSError) as exc:
            self.error("ERROR: can't attach JGF subgraph ")
            self.error(f"ERROR: {exc}")

    def cmd_remove(self, args: list[str]) -> None:
        if len(args) != 3:
            return self.error("ERROR: malformed command")
        target, is_path = args[1], args[2]
        g = self.t.g
        if is_path == "true":
            vs = g.lookup(target)
            if not vs:
                self.error("ERROR: can't remove subgraph ")
                return
            for v in list(vs):
                self.t.remove_subgraph(v)
        elif is_path == "false":
            try:
                ranks = idset.decode(target)
            except ValueError:
                return self.error("ERROR: failed to decode ranks.")
            for jobid in list(self.t.jobs):
                try:
                    if self.t.partial_cancel(jobid, ranks):
                        self.allocations.pop(jobid, None)
                        self.reservations.pop(jobid, None)
                except TraverserError:
                    pass
            for r in ranks:
                vs = g.by_rank.get(r, [])
                if vs:
                    self.t.remove_subgraph(min(vs, key=lambda v: len(v.path)))
        else:
            return self.error("ERROR: invalid path boolean input ")
        self.t.reinit()

    ALIASES = {"m": "match", "M": "multi-match", "u": "update", "j": "attach", "f": "find",
               "c": "cancel", "pc": "partial-cancel", "p": "set-property", "g": "get-property",
               "t": "set-status", "e": "get-status", "l": "list", "i": "info", "s": "stat",
               "a": "cat", "h": "help", "q": "quit"}

    def dispatch(self, line: str) -> bool:
        args = line.split()
        if not args:
            return True
        name = self.ALIASES.get(args[0], args[0])
        if name == "quit":
            return False
        fn = getattr(self, "cmd_" + name.replace("-", "_"), None)
        if fn is None:
            return True
        fn(args)
        return True


SUBSYSTEM_LETTERS = {"C": "containment", "P": "power", "IB": "ibnet", "IBB": "ibnetbw",
                     "PFS1B": "pfs1bw", "V": "virtual"}


def _dominant(spec: str) -> str:
    """``-S`` names subsystems by letters (``CA``, ``PA``, ``C+PA``; trailing A = all
    relations); the first one is the dominant hierarchy the matcher walks."""
    first = (spec or "CA").split("+")[0]
    if first == "ALL":
        return "containment"
    if first.endswith("A") and first[:-1] in SUBSYSTEM_LETTERS:
        first = first[:-1]
    return SUBSYSTEM_LETTERS.get(first, "containment")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="resource-query", add_help=False)
    p.add_argument("-L", "--load-file")
    p.add_argument("-f", "--load-format", default="grug")
    p.add_argument("-W", "--load-allowlist")
    p.add_argument("-S", "--match-subsystems", default="CA")
    p.add_argument("-P", "--match-policy", default="first")
    p.add_argument("-F", "--match-format", default="simple")
    p.add_argument("-o", "--graph-format")
    p.add_argument("-p", "--prune-filters", default=DEFAULT_PRUNE_FILTERS)
    p.add_argument("-t", "--test-output")
    p.add_argument("-r", "--reserve-vtx-vec")
    p.add_argument("-T", "--traverser", default="simple")
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
    if ns.match_format not in writers.FORMATS:
        stderr.write(f"ERROR: unknown match format {ns.match_format}\n")
        return 1
    if ns.load_format not in ("grug", "jgf", "rv1exec", "hwloc"):
        stderr.write(f"ERROR: unknown load format {ns.load_format}\n")
        return 1
    if not ns.load_file:
        stderr.write("ERROR: -L/--load-file is required\n")
        return 1
    allow = [t for t in (ns.load_allowlist or "").split(",") if t]
    try:
        graph = load_graph(ns.load_file, ns.load_format, allow)
    except (GrugError, JgfError, RError, HwlocError, OSError, ValueError) as exc:
        stderr.write(f"ERROR: can't load {ns.load_file}: {exc}\n")
        return 1
    dom = _dominant(ns.match_subsystems)
    if dom != "containment":
        if dom not in graph.roots:
            stderr.write(f"ERROR: graph has no {dom} subsystem for -S {ns.match_subsystems}\n")
            return 1
        graph = graph.project(dom)
    if ns.traverser not in ("simple", "flexible"):
        stderr.write(f"ERROR: unknown traverser {ns.traverser}\n")
        return 1
    cls = FlexibleTraverser if ns.traverser == "flexible" else Traverser
    try:
        trav = cls(graph, ns.match_policy, prune_filters=ns.prune_filters)
    except PolicyError as exc:
        stderr.write(f"ERROR: unknown match policy {ns.match_policy}: {exc}\n")
        return 1
    except TraverserError as exc:
        stderr.write(f"ERROR: {exc}\n")
        return 1
    out = stdout
    outfile = None
    if ns.test_output:
        try:
            outfile = open(ns.test_output, "w")  # noqa: SIM115 - closed below
        except OSError as exc:
            stderr.write(f"ERROR: can't open {ns.test_output}: {exc.strerror}\n")
            return 1
        out = outfile
    session = Session(trav, ns.match_format, out, stderr, ns.elapse_time)
    try:
        while True:
            if not ns.disable_prompt:
                stdout.write("resource-query> ")
                stdout.flush()
            line = stdin.readline()
            if not line:
                break
            if not session.dispatch(line):
                break
    finally:
        if outfile is not None:
            outfile.close()
    return 0


@click.command(
    "resource-query",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                      "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def main(args: tuple[str, ...]) -> None:
    """Fluxion's resource-query: load a graph and run match/cancel/find... commands from stdin."""
    try:
        rc = run(list(args), sys.stdin, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        rc = 130
    except RecursionError:
        sys.stderr.write("ERROR: resource graph too deep\n")
        rc = 1
    sys.exit(rc)
