"""What resource-query writes to standard output, as Fluxion v0.54's does: `stat`
(command.cpp's cmd_stat: the jobs allocated or reserved so far, cancelled ones included,
and the match times, which only `update` records, so after matches alone the minimum is
DBL_MAX), `list`/`info` (each job's match time as a C++ stream writes a double), and no
prompt when the commands do not come from a terminal (editline's readline).

The expected lines were observed from Fluxion v0.54.0's resource-query on the same
commands and flux-sched's t/data/resource/grugs/tiny.graphml (2026-11-28); this test's
tiny graph gives the same lines since they do not depend on the graph."""

from __future__ import annotations

import subprocess
import sys

import yaml
from support.sched_graphs import cores


def _stdout(tiny_grug, commands: str, *args: str) -> tuple[str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(tiny_grug), "-d",
         "-t", "/dev/null", *args], input=commands, capture_output=True, text=True,
        timeout=60)
    assert proc.returncode == 0
    return proc.stdout, proc.stderr


def test_stat_counts_placed_jobs_and_only_update_times(tmp_path, tiny_grug):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(cores(1)))
    out, err = _stdout(tiny_grug, f"stat\nmatch allocate {job}\nstat\n"
                                  f"match allocate_orelse_reserve {job}\ncancel 1\nstat\n"
                                  "stat x\nquit\n")
    assert out == ("INFO: Num. of Jobs Matched: 0\nINFO: Min. Match Time: 0\n"
                   "INFO: Max. Match Time: 0\nINFO: Avg. Match Time: 0\n"
                   "INFO: Num. of Jobs Matched: 1\nINFO: Min. Match Time: 1.79769e+308\n"
                   "INFO: Max. Match Time: 0\nINFO: Avg. Match Time: 0\n"
                   "INFO: Num. of Jobs Matched: 2\nINFO: Min. Match Time: 1.79769e+308\n"
                   "INFO: Max. Match Time: 0\nINFO: Avg. Match Time: 0\n")
    assert err == "ERROR: malformed command\n"


def test_stat_times_come_from_update(tmp_path, tiny_grug):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(cores(1)))
    first = tmp_path / "first.jgf"
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(tiny_grug), "-d",
         "-F", "jgf", "-t", str(first)], input=f"match allocate {job}\nquit\n",
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    (tmp_path / "r.json").write_text(first.read_text().splitlines()[0] + "\n")
    out, _err = _stdout(tiny_grug, f"update allocate jgf {tmp_path / 'r.json'} 5 0 3600\n"
                                   "stat\nquit\n")
    lines = dict(line.split(": ", 1)[1].split(": ") for line in out.splitlines())
    assert lines["Num. of Jobs Matched"] == "1"
    low, high, avg = (float(lines[k]) for k in ("Min. Match Time", "Max. Match Time",
                                                 "Avg. Match Time"))
    assert 0 < low == high == avg < 60


def test_no_prompt_when_commands_are_piped(tmp_path, tiny_grug):
    """Fluxion's resource-query without -d, commands on a pipe: stdout stays empty."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(cores(1)))
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(tiny_grug),
         "-t", "/dev/null"], input=f"match allocate {job}\nquit\n", capture_output=True,
        text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_list_and_info_write_each_jobs_match_time(tmp_path, tiny_grug):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(cores(1)))
    out, err = _stdout(tiny_grug, f"match allocate {job}\nmatch allocate_orelse_reserve "
                                  f"{job}\ncancel 1\nlist\ninfo 2\nquit\n")
    assert err == ""
    lines = out.splitlines()
    assert [line.rsplit(", ", 1)[0] for line in lines] == [
        f"INFO: 1, CANCELED, 0, {job}", f"INFO: 2, ALLOCATED, 0, {job}",
        f"INFO: 2, ALLOCATED, 0, {job}"]
    for line in lines:
        took = line.rsplit(", ", 1)[1]
        # std::ostream's default: 6 significant digits, no trailing zeros
        assert took == f"{float(took):g}" and 0 < float(took) < 60
