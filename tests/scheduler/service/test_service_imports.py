"""What loading the scheduler service imports (issue 32: the leader's memory before any
node). The service takes jobspecs as mappings, grows its graph from nodes and answers
refusals without suggestions until a jobspec is refused: PyYAML (and the ``datetime`` and
``base64`` its constructor imports), ``difflib`` and the R and JGF readers load when
first used, not with the service. Each case runs in a fresh interpreter, since what has
been imported is the point; the oracle for the deferred uses is the same call's answer
in this test process, where everything is loaded."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from fluxnode.scheduler.jobspec.document import JobspecError
from fluxnode.scheduler.jobspec.jobspec import Jobspec

# imported by nothing the service runs until it is used
DEFERRED = ("yaml", "difflib", "fluxnode.scheduler.readers.rv1",
            "fluxnode.scheduler.readers.jgf", "fluxnode.scheduler.writers")

YAML_JOBSPEC = """\
version: 1
resources:
  - type: slot
    count: 2
    label: default
    with:
      - type: core
        count: 0x2
tasks:
  - command: [app]
    slot: default
    count: {per_slot: 1}
attributes: {system: {duration: 10}, user: {when: 2026-11-29}}
"""


def run(code: str) -> list:
    """What ``code`` (run in a fresh interpreter) prints, one JSON value per line."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_loading_the_service_imports_no_yaml_difflib_readers_or_writers():
    loaded, = run(f"""
        import json, sys
        import fluxnode.scheduler.service
        print(json.dumps([m for m in {DEFERRED!r} if m in sys.modules]))
    """)
    assert loaded == []


def test_a_yaml_jobspec_loads_pyyaml_and_reads_as_it_did():
    before, after, parsed = run(f"""
        import json, sys
        import fluxnode.scheduler.service
        from fluxnode.scheduler.jobspec.jobspec import Jobspec
        before = "yaml" in sys.modules
        js = Jobspec.parse({YAML_JOBSPEC!r})
        print(json.dumps(before))
        print(json.dumps("yaml" in sys.modules))
        print(json.dumps(js.to_dict(), default=str))
    """)
    assert (before, after) == (False, True)
    # the same as in this process (PyYAML loaded): octal-free hex count, a date constructed
    assert parsed == json.loads(json.dumps(Jobspec.parse(YAML_JOBSPEC).to_dict(), default=str))
    assert parsed["resources"][0]["with"][0]["count"] == 2


TASK = {"command": ["app"], "slot": "default", "count": {"per_slot": 1}}
MISSPELT = [  # a resource key, then a task key (both suggestions come from difflib)
    {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "default",
                                  "with": [{"type": "core", "cont": 1}]}], "tasks": [TASK]},
    {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "default",
                                  "with": [{"type": "core", "count": 1}]}],
     "tasks": [{"comand": ["app"], "slot": "default", "count": {"per_slot": 1}}]},
]


def refusal(jobspec: dict) -> str:
    try:
        Jobspec.parse(jobspec)
    except JobspecError as e:
        return str(e)
    raise AssertionError(f"accepted: {jobspec}")


def test_a_misspelt_key_still_gets_its_suggestion():
    there = run(f"""
        import json
        import fluxnode.scheduler.service
        from fluxnode.scheduler.jobspec.jobspec import Jobspec
        from fluxnode.scheduler.jobspec.document import JobspecError
        for bad in {MISSPELT!r}:
            try:
                Jobspec.parse(bad)
            except JobspecError as e:
                print(json.dumps(str(e)))
    """)
    assert there == [refusal(bad) for bad in MISSPELT]
    assert "(did you mean 'count'?)" in there[0]
    assert "(is 'comand' a misspelt 'command'?)" in there[1]
