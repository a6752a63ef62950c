"""resource-query's command language: one method per command, writing what Fluxion writes.

A :class:`Session` holds the traverser and the jobs it placed; ``dispatch``
reads one line (``match allocate FILE``, ``cancel 3``, ``find status=down``...),
runs the command and writes its output to the ``-t`` file (or stdout) and its
errors to stderr as ``ERROR: ...`` lines, never a traceback.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import time
from pathlib import Path
from typing import TextIO

from fluxnode.broker_conf import idset
from fluxnode.broker_conf.rv1 import RError
from fluxnode.scheduler import writers
from fluxnode.scheduler.jobspec.jobspec import FLUXION_STATIC_TYPES, JobspecError
from fluxnode.scheduler.jobspec.parsed_cache import ParsedJobspecs
from fluxnode.scheduler.readers import jansson_error as jansson
from fluxnode.scheduler.readers.jgf import (
    JgfDuplicateRoot,
    JgfError,
    JgfFetchError,
    add_jgf,
    fetch_jgf_keys,
    load_jgf_document,
)
from fluxnode.scheduler.readers.rv1 import ranks_in_R
from fluxnode.scheduler.resource_query.job_ids import JobIds
from fluxnode.scheduler.resource_query.picks import (
    SilentReaderError,
    jgf_picks,
    jgf_update_refusal,
    only_other_roots,
    rv1exec_picks,
)
from fluxnode.scheduler.traversers.dfu import (
    MatchResult,
    NoMatch,
    Traverser,
    TraverserErrno,
    TraverserError,
    Unsatisfiable,
)
from fluxnode.scheduler.traversers.dfu_cancel import RemoveError
from fluxnode.scheduler.traversers.find import FindError, find
from fluxnode.scheduler.traversers.reader_plans import plan_outside_walk, release_outside_walk

SEP = "INFO: =============================\n"
# resource-query's graph lasts from 0 to Fluxion's SYSTEM_MAX_DURATION (100 years,
# resource/config/system_defaults.hpp): a jobspec without a duration gets all of it
SYSTEM_MAX_DURATION = 3153600000
HELP = """Usage: resource-query [OPTIONS...]
  -L, --load-file=FILE
  -f, --load-format=grug|hwloc|jgf|jgf_shorthand|rv1exec|rv1exec_force
  -W, --load-allowlist=TYPES  -S, --match-subsystems=CA  -P, --match-policy=POLICY
  -F, --match-format=simple|pretty_simple|jgf|jgf_shorthand|rlite|rv1|rv1_nosched|rv1_shorthand
  -T, --traverser-policy=simple|flexible  -p, --prune-filters=SPEC
  -g, --graph-format=dot|graphml  -o, --graph-output=BASENAME  -r, --reserve-vtx-vec=N
  -t, --test-output=FILE  -e, --elapse-time  -d, --disable-prompt  -h, --help
"""


class _UpdateRefused(ValueError):
    """Fluxion's JGF reader refuses an update (picks.jgf_update_refusal's message)."""


class Session:
    def __init__(self, traverser: Traverser, fmt: str, out: TextIO, err: TextIO,
                 elapse: bool = False, console: TextIO | None = None) -> None:
        self.t = traverser
        # resource-query's graph counts its nodes up as Fluxion's metadata does
        traverser.start_node_stats()
        self.fmt = fmt
        self.out = out
        self.err = err
        # -e: each match's time and visit counts, written where Fluxion's resource-query
        # writes them (mostly standard output, ``console``, even when -t names a file)
        self.elapse = elapse
        self.console = console if console is not None else out
        self.jobid = 1
        # Fluxion's job ids -> the traverser's, which differ once a writer failed
        self.ids = JobIds()
        self._stop: float | None = None  # when the last match's R was emitted (-e)
        self.allocations: dict[int, int] = {}
        self.reservations: dict[int, int] = {}
        # jobid -> (state, start, jobspec file, seconds its match took: job_info_t's overhead)
        self.jobinfo: dict[int, tuple[str, int, str, float]] = {}
        self.update_times: list[float] = []  # seconds each `update` took (stat)
        # jobs an update placed without taking anything of the walked tree (a JGF of
        # another dominant subsystem, picks.only_other_roots): cancel fails on them
        # jobs an update placed from a JGF of another dominant subsystem -> the walked
        # tree's vertices its reader planned (reader_plans.py)
        self.unwalked_jobs: dict[int, list] = {}
        # a match failing with no errno of its own reports the errno an earlier step
        # left (see TraverserErrno and dispatch)
        self.t.report_errno = True
        self.t.graph_end = SYSTEM_MAX_DURATION
        self.t.errno = errno.ENOTTY
        # resource-query's one match writer: what a traversal emits stays in it until a
        # write succeeds (writers.MatchWriters)
        self.writer = writers.MatchWriters(fmt, traverser.g.dominant)
        # the resource types Fluxion's interner holds when resource-query closes it after
        # loading (data_std's, the matcher's "*", the graph's and the prune filters'): a
        # jobspec naming another type fails to parse (libjobspec's "known to fluxion");
        # attach and update add the types of what they read (their interner is open)
        self.known_types: set[str] = set(FLUXION_STATIC_TYPES) | {"*"}
        self.known_types |= {a for a in traverser.prune_anchored if a != "ALL"}
        self.known_types |= traverser.prune_types
        self._learn_types()
        # the jobspecs that parsed, by their text: a stream reads the same files again
        # (parsed_cache.py says why this gives what a fresh parse gives)
        self.jobspecs = ParsedJobspecs()

    def _learn_types(self) -> None:
        self.known_types |= set(self.t.g.by_type)
        if self.t.loaded is not None:  # -S PA walks a projection: all it loaded is known
            self.known_types |= set(self.t.loaded.by_type)

    # -- output -----------------------------------------------------------
    def emit(self, result=None, labels: dict[int, str] | None = None) -> str:
        """What ``rq->writers->emit`` writes after a traversal that emitted ``result``
        (None: one that emitted nothing, e.g. a failed match). Raises WriterEmitError."""
        if result is not None:
            self.writer.add(result, labels=labels)
        return self.writer.emit()

    def error(self, msg: str) -> None:
        self.err.write(msg + "\n")

    def _traverser_said(self) -> bool:
        """reapi_cli_t::match_allocate after a failed traversal: the traverser's own
        message (its refusals, traversers' ``err_msg``), when it wrote one."""
        said = "".join(getattr(self.t, "err_msg", ()))
        if said:
            self.error(f"match_allocate: ERROR: {said}")
        return bool(said)

    # -- commands ---------------------------------------------------------
    def run_match(self, op: str, fn: str) -> bool:
        jobid = self.jobid
        try:
            text = Path(fn).read_bytes()  # not UTF-8 is a jobspec error, below
        except OSError as exc:
            self.t.errno = exc.errno or errno.ENOENT
            self.error(f"ERROR: can't open {fn}")
            return True
        # reapi_cli_t::match_allocate consumes a jobid only once the jobspec has parsed and
        # the traverser has answered (a match, busy or unsatisfiable): a jobspec error or
        # another traverser error returns first, and the next match gets the same jobid. A
        # jobspec error leaves `sat` true, so `match satisfiability` of it says "Satisfiable".
        matched, sat, result, consumed = True, True, None, True
        # reapi_cli_t::match_allocate's ELAPSE: parse, walk and writer, timed together
        t0 = time.perf_counter()
        reached_writer = True  # match_allocate calls writers->emit unless it returned first
        try:
            js = self.jobspecs.parse(text, self.known_types)
            result = self.t.match(js, op=op, jobid=self.ids.for_match(jobid, self.t.jobs))
        except Unsatisfiable:
            matched, sat = False, False
            self._traverser_said()
        except TraverserErrno as exc:
            # reapi_cli_t::match_allocate returns before counting the jobid; resource-query
            # reads ENOENT (like ENODEV) as unsatisfiable
            if not self._traverser_said():
                self.error(f"match_allocate: ERROR: traverser: {os.strerror(exc.errno)}")
            matched, consumed, reached_writer = False, False, False
            sat = exc.errno != errno.ENOENT
        except NoMatch:
            matched = False
            self._traverser_said()
        except JobspecError as exc:
            self.t.errno = errno.EINVAL
            self.error(f"match_allocate: ERROR: Jobspec error for {jobid}: "
                       f"{exc.what if hasattr(exc, 'what') else exc}")
            matched = consumed = reached_writer = False
        except TraverserError as exc:
            self.error(f"match_allocate: ERROR: {exc}")
            matched = consumed = reached_writer = False
        R = ""
        if reached_writer:
            # reapi_cli_t::match_allocate: the writer emits after any traversal that did not
            # fail hard (a match, EBUSY, ENODEV, a satisfiability check); when that emit
            # fails it returns -1 with the writer's errno before incr_job_counter, and
            # run_match reads ENODEV/ENOENT as unsatisfiable, any other errno as not
            try:
                emitted = matched and op != "satisfiability"
                R = self.emit(result if emitted else None,
                              self.t.labels_of(result.selection) if emitted else None)
                # match_allocate's end_time: once the writer has emitted R, before
                # anything is printed (run_match and print_schedule_info print after)
                self._stop = time.perf_counter()
            except writers.WriterEmitError as exc:
                self.t.errno = exc.errno
                self.error("match_allocate: ERROR: match writer emit: "
                           f"{os.strerror(exc.errno)}")
                matched = consumed = False
                sat = exc.errno not in (errno.ENODEV, errno.ENOENT)
        if op not in self.NO_JOBID_OPS and consumed:
            self.jobid += 1
        self.out.write(R)
        if op == "satisfiability":
            self.out.write(SEP)
            self.out.write(f"INFO: {'Satisfiable' if matched or sat else 'Unsatisfiable'} "
                           "request\n")
            self.out.write(SEP)
            self._write_elapse(t0, self.console)
            return matched
        if matched:
            self._placed(jobid, result, fn, t0)
        else:
            self._not_placed(jobid, sat, t0)
        return matched

    def _write_elapse(self, t0: float | None, elapse_to: TextIO) -> None:
        """-e: the time from ``t0`` to the writer's emit (``_stop``, else now), as C++'s
        std::to_string writes a double, and the walk's visit counts (print_schedule_info
        and print_sat_info in Fluxion)."""
        stop, self._stop = self._stop, None
        if not self.elapse or t0 is None:
            return
        stop = time.perf_counter() if stop is None else stop
        elapse_to.write(f"INFO: ELAPSE={stop - t0:f}\n")
        self.console.write(f"INFO: PREORDER VISIT COUNT={self.t.total_preorder}\n")
        self.console.write(f"INFO: POSTORDER VISIT COUNT={self.t.total_postorder}\n")

    def _placed(self, jobid: int, result, fn: str, t0: float | None = None) -> None:
        """Write a placed job's schedule info (after its R) and remember it; a match
        without allocating is MATCHED and not remembered (print_schedule_info)."""
        self.out.write(SEP)
        self.out.write(f"INFO: JOBID={jobid}\n")
        at = result.at
        mode = "MATCHED" if result.status == "MATCHED" else (
            "ALLOCATED" if at == 0 else "RESERVED")
        self.out.write(f"INFO: RESOURCES={mode}\n")
        self.out.write(f"INFO: SCHEDULED AT={'Now' if at == 0 else at}\n")
        self._write_elapse(t0, self.console)
        self.out.write(SEP)
        if mode == "MATCHED":
            return
        (self.allocations if at == 0 else self.reservations)[jobid] = jobid
        overhead = time.perf_counter() - t0 if t0 is not None else 0.0
        self.jobinfo[jobid] = ("ALLOCATED" if at == 0 else "RESERVED", at, fn, overhead)

    def _not_placed(self, jobid: int, satisfiable: bool = True, t0: float | None = None) -> None:
        self.out.write(SEP)
        self.out.write("INFO: No matching resources found\n")
        if not satisfiable:
            self.out.write("INFO: Unsatisfiable request\n")
        self.out.write(f"INFO: JOBID={jobid}\n")
        self._write_elapse(t0, self.out)  # Fluxion writes this one ELAPSE to the -t file
        self.out.write(SEP)

    OPS = ("allocate", "allocate_orelse_reserve", "allocate_with_satisfiability",
           "satisfiability", "without_allocating", "without_allocating_future")
    # reapi_cli_t::match_allocate counts a job id for every other op
    NO_JOBID_OPS = ("satisfiability", "without_allocating", "without_allocating_future")

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

    @staticmethod
    def _strtoll(s: str) -> int:
        """C's strtoll/atoll in base 10: the leading integer, 0 when there is none,
        saturated at the int64 range (resource-query reads every number so)."""
        m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", s)
        n = int(m.group(1)) if m else 0
        return max(-(2**63), min(2**63 - 1, n))

    @classmethod
    def _jobid(cls, s: str) -> int:
        """A job id as cancel, partial-cancel and info read one: strtoll cast to a
        uint64_t, so "2x" is job 2 and "-1" is 2**64 - 1."""
        return cls._strtoll(s) % 2**64

    def cmd_cancel(self, args: list[str]) -> None:
        if len(args) < 2 or len(args) > 3:
            return self.error("ERROR: malformed command")
        jobid = self._jobid(args[1])
        if jobid in self.unwalked_jobs:
            # Fluxion's remove releases the spans its reader planned, finds none of the
            # job in the walked tree and fails; the job stays (reapi_cli_t::cancel erases
            # it only on success)
            release_outside_walk(self.t, self.unwalked_jobs[jobid], self.ids.of(jobid))
            self.unwalked_jobs[jobid] = []
            return self.error(f"cancel: ERROR: error encountered while removing job {jobid}")
        if jobid in self.allocations or jobid in self.reservations:
            try:
                self.t.cancel(self.ids.of(jobid))
            except TraverserError:
                self.error(f"cancel: ERROR: error encountered while removing job {jobid}")
            self.allocations.pop(jobid, None)
            self.reservations.pop(jobid, None)
            if jobid in self.jobinfo:
                self.jobinfo[jobid] = ("CANCELED",) + self.jobinfo[jobid][1:]
        else:
            self.t.errno = errno.ENOENT  # reapi_cli_t::cancel, in its words
            return self.error(f"cancel: ERROR: nonexistent job {jobid}")
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
            text = Path(args[3]).read_bytes()
        except OSError:
            return self.error(f"ERROR: can't open {args[3]}")
        if jobid in self.allocations:
            try:
                try:
                    doc = jansson.loads(text)
                    ranks = ranks_in_R(doc) if reader == "rv1exec" else self._jgf_ranks(doc)
                except (ValueError, KeyError, TypeError, RecursionError, RError):
                    # the reader's partial_cancel fails: dfu_impl_t::remove's words, which
                    # do_partial_remove writes to stdout
                    self.console.write("remove: partial_cancel returned error.\n")
                    raise
                if not ranks:
                    self.console.write("remove: rank_to_root is empty.\n")
                    raise TraverserError("rank_to_root is empty")
                # rv1exec names ranks only: Fluxion cancels their vertices and reduces the
                # ancestors' subtree spans by the units freed (dfu_impl_t::remove)
                full = self.t.partial_cancel(self.ids.of(jobid), ranks,
                                             by_counts=reader == "rv1exec")
                if full:
                    self.allocations.pop(jobid, None)
            except (ValueError, KeyError, TypeError, RecursionError, RError,
                    TraverserError) as exc:
                # Fluxion reads R inside its remove, after zeroing the visit counts
                self.t.total_preorder = self.t.total_postorder = 0
                if isinstance(exc, RemoveError):
                    # do_partial_remove writes the traverser's message to stdout (the
                    # rank-based remove's, which fluxnode's traverser words as Fluxion's)
                    self.console.write(f"{exc}\n")
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
            sel = find(self.t, self.ids.criteria(criteria))
        except FindError:
            # dfu_impl_t::find's validate failing, as reapi_cli_t::find passes it on (its
            # own name, then the traverser's message, which starts with it too)
            return self.error(f"findfind: invalid criteria: {criteria}.")
        # reapi_cli_t::find: the traversal emits into the session's writer, then emit_json;
        # a failing emit_json is reported and the expression lines are not written
        self.writer.add(sel, excl_parent=False)
        self.t.forget_labels(sel)
        try:
            o = self.writer.emit_json()
        except writers.WriterEmitError as exc:
            self.t.errno = exc.errno
            return self.error(f"find: ERROR: find writer emit: {os.strerror(exc.errno)}")
        if o is not None:
            self.out.write(o if isinstance(o, str) else writers.dumps(o) + "\n")
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
            self.t.set_property(v, args[2][:pos], args[2][pos + 1:])

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
            self.t.errno = errno.ENOENT  # reapi_cli_t::info, in its words
            return self.error(f"info: ERROR: nonexistent job {jobid}")
        print(self._job_line(jobid, info))

    @staticmethod
    def _job_line(jobid: int, info: tuple[str, int, str, float]) -> str:
        """cmd_info's and cmd_list's line: the overhead is the time the job's match (or
        update) took, as a C++ stream writes a double."""
        return f"INFO: {jobid}, {info[0]}, {info[1]}, {info[2]}, {info[3]:g}"

    def cmd_list(self, args: list[str]) -> None:
        for jobid in sorted(self.jobinfo):  # ctx->jobs is a std::map
            print(self._job_line(jobid, self.jobinfo[jobid]))

    def cmd_stat(self, args: list[str]) -> None:
        """command.cpp's cmd_stat: the jobs allocated or reserved so far (cancelled ones
        too) and the match times, which only ``update`` records (update_match_perf; a
        ``match`` leaves them, so the minimum stays DBL_MAX), as a C++ stream writes a
        double."""
        if len(args) != 1:
            return self.error("ERROR: malformed command")
        njobs = len(self.jobinfo)
        times = self.update_times
        low = (min(times) if times else sys.float_info.max) if njobs else 0.0
        high = max(times) if times else 0.0
        avg = sum(times) / njobs if njobs else 0.0
        print(f"INFO: Num. of Jobs Matched: {njobs}")
        print(f"INFO: Min. Match Time: {low:g}")
        print(f"INFO: Max. Match Time: {high:g}")
        print(f"INFO: Avg. Match Time: {avg:g}")

    def cmd_cat(self, args: list[str]) -> None:
        if len(args) != 2:
            return self.error("ERROR: malformed command")
        try:
            sys.stdout.write(Path(args[1]).read_bytes().decode(errors="replace"))
        except OSError:
            self.error(f"ERROR: can't open {args[1]}")

    def cmd_help(self, args: list[str]) -> None:
        sys.stdout.write(HELP)

    def cmd_update(self, args: list[str]) -> None:
        """``update allocate|reserve jgf|rv1exec FILE JOBID STARTTIME DURATION``: replay an
        allocation (what a match wrote as JGF or R) as job JOBID, written like a match."""
        if len(args) != 7:
            return self.error("ERROR: malformed command")
        if args[1] not in ("allocate", "reserve"):  # command.cpp's update, in its order
            return self.error(f"ERROR: unknown subcmd {args[1]}")
        if args[2] not in ("jgf", "rv1exec", "jgf_shorthand"):
            return self.error(f"ERROR: unsupported reader {args[2]}")
        t0 = time.perf_counter()
        fn = args[3]
        # command.cpp's update, its checks in its order and words
        try:
            raw = Path(fn).read_bytes()
        except OSError:
            return self.error(f"ERROR: can't open {fn}")
        jobid = self._strtoll(args[4])
        if jobid in self.allocations or jobid in self.reservations:
            return self.error("ERROR: existing Jobid ")
        at, duration = self._strtoll(args[5]), self._strtoll(args[6]) % 2**64
        if at < 0 or duration == 0:
            return self.error(f"ERROR: invalid time ({at}, {duration})")
        json_error = ""
        try:
            doc = jansson.loads(raw)
        except (ValueError, RecursionError) as exc:
            doc = None  # the reader fails: the traverser's run returns an error
            json_error = str(exc)
        # update_run sets the job counter to the job's id, then steps it past
        self.jobid = jobid + 1
        try:
            if doc is None:
                raise ValueError(f"fetch_jgf: json_loads returned an error: {json_error}.")
            # a job id whose match writer failed: Fluxion plans again under it
            tid = self.ids.for_match(jobid, self.t.jobs)
            planned = None
            if args[2] == "rv1exec":
                read = rv1exec_picks(self.t.g, doc, (at, duration))
                picks, planned = read.picks, read.planned
                if len(picks) < 2:  # no vertex read: the update fails without a word
                    raise SilentReaderError()
            else:
                picks = jgf_picks(self.t.g, doc, shorthand=args[2] == "jgf_shorthand")
                if not picks:
                    raise SilentReaderError()
                refusal = jgf_update_refusal(picks, at, duration)
                if refusal is not None:
                    raise _UpdateRefused(refusal)
            if args[2] != "rv1exec" and only_other_roots(self.t.g, doc):
                # written under another dominant subsystem: nothing is walked or
                # written, the job is placed, and the reader plans the JGF's exclusive
                # vertices; of those, the ones in the walked tree matter (reader_plans.py)
                result = MatchResult(jobid, "RESERVED" if at else "ALLOCATED", at, duration,
                                     0.0, [])
                walked = {id(v) for v in self.t.g.vertices}
                planned = [v for v, _units, x in picks if x and id(v) in walked]
                self.unwalked_jobs[jobid] = plan_outside_walk(self.t, planned, tid, at,
                                                              duration, reserve=False)
            else:
                # like a match's answer, a job that starts now is allocated, later reserved;
                # but the readers keep its spans as allocations whenever it starts (their
                # update_data.reserved stays false: find sched-future=reserved misses it)
                result = self.t.replay(picks, tid, at, duration, reserve=False,
                                       x_checked=planned is None)
                # the reader planned these (the JGF's: its exclusive vertices), the walk
                # none (upd_plan, full false): a node-exclusive policy's rest stays free
                kept = planned if planned is not None else {v.uniq_id for v, _u, x in picks
                                                            if x}
                self.t.unplan_units_but(tid, result.selection, kept)
        except (ValueError, TypeError, KeyError, TraverserError) as exc:
            # update_run's words, then what went wrong: in the readers' words where
            # fluxnode knows them (picks.py), else its own
            self.error("ERROR: traverser run () returned error ")
            # the rv1exec reader says nothing of R it cannot read
            if not (doc is None and args[2] == "rv1exec" or isinstance(exc, SilentReaderError)):
                self.error(f"ERROR: {exc}")
            result = None
        # resource-query's update: writers->emit after the run whatever it returned, its
        # error ignored (what it could not write stays in the writer)
        try:
            self.out.write(self.emit(result, self.t.labels_of(result.selection)
                                     if result is not None else None))
        except writers.WriterEmitError:
            pass
        self.update_times.append(time.perf_counter() - t0)
        if result is None:
            return self._not_placed(jobid, True, t0)
        self._placed(jobid, result, fn, t0)

    def cmd_attach(self, args: list[str]) -> None:
        if len(args) != 2:
            return self.error("ERROR: malformed command")
        try:
            text = Path(args[1]).read_bytes()
        except OSError:
            return self.error(f"ERROR: can't open {args[1]}")  # command.cpp's attach
        try:
            doc = load_jgf_document(text)
            fetch_jgf_keys(doc)
            add_jgf(self.t.g, doc)
            self._learn_types()
            self.t.reinit()
        except (JgfDuplicateRoot, JgfFetchError) as exc:
            # reapi_cli_t::add_subgraph's words around the reader's (its m_err_msg ends
            # in a newline)
            self.error("ERROR: can't attach JGF subgraph ")
            self.error("ERROR: add_subgraph: ERROR: add subgraph error: "
                       f"{os.strerror(errno.EINVAL)}\nadd_subgraph: ERROR: reader returned "
                       f"error: {exc}\n\n")
        except (JgfError, OSError) as exc:
            self.error("ERROR: can't attach JGF subgraph ")
            self.error(f"ERROR: {exc}")

    @staticmethod
    def _flux_idset(text: str) -> list[int]:
        """The ranks of ``text`` as flux-core's idset_decode reads them: besides RFC 22's
        rules, a range's end above its start (``6-6`` is refused) and each element
        above the ones before it (parse_range, append_element)."""
        ranks = idset.decode(text)
        body = text[1:-1] if text.startswith("[") and text.endswith("]") else text
        last = -1
        for item in body.split(",") if body else []:
            lo, sep, hi = item.partition("-")
            if sep and int(hi) <= int(lo) or int(lo) <= last:
                raise ValueError(f"idset_decode refuses {text}")
            last = int(hi) if sep else int(lo)
        return ranks

    def _rank_roots(self, ranks: list[int]) -> list | None:
        """The subgraph roots ``remove RANKS false`` takes away, as Fluxion's
        ``dfu_impl_t::remove_subgraph(ranks)`` finds them: for each rank its by_rank
        index knows (in rank order), the vertex of the shortest path. A rank whose
        index is there but empty (its vertices went with an earlier ``remove PATH
        true``, which leaves the key) has no root (a null vertex), and neither that nor
        a root without a parent has a parent edge to take out: then the whole removal
        fails (None) and no vertex goes."""
        roots = []
        for r in sorted(set(ranks)):
            vs = self.t.g.by_rank.get(r)
            if vs is None:
                continue
            if not vs:
                return None
            v = min(vs, key=lambda u: len(u.path))
            if v.parent is None:
                return None
            roots.append(v)
        return roots

    def cmd_remove(self, args: list[str]) -> None:
        if len(args) != 3:
            return self.error("ERROR: malformed command")
        target, is_path = args[1], args[2]
        g = self.t.g
        if is_path == "true":
            vs = g.lookup(target)
            if not vs:
                # command.cpp's remove, then reapi_cli_t::remove_subgraph's words: the
                # traverser fails without an errno or a message of its own
                self.error("ERROR: can't remove subgraph ")
                self.error("ERROR: remove_subgraph: ERROR: remove_subgraph error: "
                           f"{os.strerror(self.t.errno)}")
                self.error("remove_subgraph: ERROR: traverser returned error: \n")
                return
            for v in list(vs):
                self.t.remove_subgraph(v)
        elif is_path == "false":
            try:
                ranks = self._flux_idset(target)
            except ValueError:
                return self.error("ERROR: failed to decode ranks.")
            gone, failed = self.t.remove_ranks(ranks)
            for tid in gone:
                jobid = self.ids.fluxion_id(tid)
                if jobid is not None:
                    self.allocations.pop(jobid, None)
                    self.reservations.pop(jobid, None)
            if failed is not None:
                # command.cpp's remove: the rank-based release failed (a rank the graph
                # lacks, or a vertex's cancel), nothing is removed; what it did stays
                self.error("ERROR: can't partial cancel subgraph ")
                return self.error(f"ERROR: {failed}")
            roots = self._rank_roots(ranks)
            if roots is None:
                # dfu_impl_t::remove_subgraph(ranks) failed: nothing removed, no counts
                # updated (command.cpp returns before initialize), and the traverser's
                # message is empty (no newline after "ERROR: ")
                self.error("ERROR: can't remove subgraph ")
                self.err.write("ERROR: ")
                return
            for v in roots:
                self.t.remove_subgraph(v)
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
        # resource-query reads each command with editline's readline(), whose terminal
        # probe of a stdin that is no terminal leaves errno ENOTTY
        self.t.errno = errno.ENOTTY
        name = self.ALIASES.get(args[0], args[0])
        if name == "quit":
            return False
        fn = getattr(self, "cmd_" + name.replace("-", "_"), None)
        if fn is None:
            return True
        fn(args)
        return True
