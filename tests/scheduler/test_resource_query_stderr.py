"""resource-query's error lines in Fluxion v0.54's words: command.cpp's own, and those of
reapi_cli_t it passes on with the function's name first (`cancel: ERROR: ...`,
`info: ERROR: ...`, `findfind: invalid criteria: ....`, remove_subgraph's three lines).

EXPECTED_STDERR is what Fluxion v0.54.0's resource-query wrote to stderr for COMMANDS on
this test's tiny graph (conftest's TINY_GRUG) on 2026-11-28, with the same job
specification; fluxnode's -t output was the same as Fluxion's there too."""

from __future__ import annotations

import subprocess
import sys

import yaml
from support.rq_run import rq
from support.sched_graphs import cores

COMMANDS = """match allocate {job}
cancel 2x
cancel 1
cancel -1
info 1x
info 9
find status=up and
find (status=up
find status=upp
find foo
attach {tmp}/nonexist.json
remove /tiny0/foo true
remove 7 false
remove 0-1,9 false
partial-cancel 3 rv1exec {job}
update allocate jgf {job} 1 -1 10
update allocate jgf {job} 1 0 0
quit
"""

EXPECTED_STDERR = (
    'cancel: ERROR: nonexistent job 2\n'
    'cancel: ERROR: nonexistent job 18446744073709551615\n'
    'info: ERROR: nonexistent job 9\n'
    'findfind: invalid criteria: status=up and.\n'
    'findfind: invalid criteria: (status=up.\n'
    'findfind: invalid criteria: status=upp.\n'
    'findfind: invalid criteria: foo.\n'
    "ERROR: can't open {tmp}/nonexist.json\n"
    "ERROR: can't remove subgraph \n"
    'ERROR: remove_subgraph: ERROR: remove_subgraph error: Inappropriate ioctl for device\n'
    'remove_subgraph: ERROR: traverser returned error: \n'
    '\n'
    "ERROR: can't partial cancel subgraph \n"
    'ERROR: remove: 7 not found in by_rank map.\n'
    "ERROR: can't partial cancel subgraph \n"
    'ERROR: remove: 9 not found in by_rank map.\n'
    'ERROR: nonexistent job 3\n'
    'ERROR: invalid time (-1, 10)\n'
    'ERROR: invalid time (0, 0)\n'
)


def test_error_lines_are_fluxions(tmp_path, tiny_grug):
    job = tmp_path / "unit.yaml"
    job.write_text(yaml.safe_dump(cores(1)))
    _out, err, rc = rq(tmp_path, tiny_grug, COMMANDS.format(job=job, tmp=tmp_path))
    assert rc == 0
    assert err == EXPECTED_STDERR.format(tmp=tmp_path)


def test_stderr_appended_to_the_output_file_lands_after_what_was_written(tmp_path,
                                                                         tiny_grug):
    """flux-sched's t3008 runs `resource-query -t OUT < cmds 2>> OUT`: Fluxion's -t stream
    is flushed at each line, so an error appended to the same file lands after the
    output written before it (fluxnode wrote its output over it at exit)."""
    job = tmp_path / "unit.yaml"
    job.write_text(yaml.safe_dump(cores(1)))
    out = tmp_path / "both.out"
    cmds = tmp_path / "cmds"
    cmds.write_text(f"match allocate {job}\npartial-cancel 1 foo {job}\nquit\n")
    subprocess.run(f'"{sys.executable}" -m fluxnode resource-query -L "{tiny_grug}" -d '
                   f'-t "{out}" < "{cmds}" 2>> "{out}"', shell=True, check=True, timeout=60)
    text = out.read_text()
    assert text.endswith("INFO: SCHEDULED AT=Now\nINFO: =============================\n"
                         "ERROR: unsupported reader foo\n")
    assert text.count("INFO: JOBID=1\n") == 1
