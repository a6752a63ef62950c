"""`fluxnode resource-query` fed hostile jobspec files: each prints one error and the
session goes on to the next command, as Fluxion's does (issue 11: ``[`` x 30000 killed
the process with SIGSEGV, a non-UTF-8 file ended the session with a traceback)."""

from __future__ import annotations

import yaml
from support.rq_run import rq
from support.sched_graphs import cores


def test_hostile_jobspecs_are_errors_and_the_session_goes_on(tmp_path, tiny_grug):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(cores(1)))
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 30000 + "]" * 30000)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(good.read_bytes().replace(b"core", b"c\xffre", 1))
    bomb = tmp_path / "bomb.yaml"
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    bomb.write_text("\n".join(lines) + "\n")
    inf = tmp_path / "inf.yaml"
    spec = cores(1)
    spec["attributes"] = {"system": {"duration": float("inf")}}
    inf.write_text(yaml.safe_dump(spec))
    deep_json = tmp_path / "deep.json"
    deep_json.write_text("[" * 100000 + "]" * 100000)
    script = "".join(f"match allocate {f}\n" for f in (deep, binary, bomb, inf)) + (
        f"update allocate rv1exec {deep_json} 9 0 10\n"
        f"cat {binary}\n"
        f"match allocate {good}\nquit\n"
    )
    out, err, rc = rq(tmp_path, tiny_grug, script)
    assert rc == 0, err
    assert "Traceback" not in err
    # a jobspec error consumes no jobid (reapi_cli_t::match_allocate returns before
    # incr_job_counter), so every one of them is "for 1", and so is the good match after them
    assert "ERROR: Jobspec error for 1: jobspec nests too deeply" in err
    assert "ERROR: Jobspec error for 1: jobspec is not UTF-8 text: byte 0xff" in err
    assert "ERROR: Jobspec error for 1: jobspec has more than 4096 nodes" in err
    assert "ERROR: Jobspec error for 1: duration '.inf' is not a finite number" in err
    # update_run's words (Fluxion's rv1exec reader adds none), and it sets the job
    # counter past the update's id whatever the run returned, so the good match is job
    # 10 (Fluxion v0.54's resource-query wrote the same line and id on this script)
    assert "\nERROR: traverser run () returned error \n" in err
    # the session went on: the last, good jobspec was matched
    assert "INFO: JOBID=10\nINFO: RESOURCES=ALLOCATED\n" in out
