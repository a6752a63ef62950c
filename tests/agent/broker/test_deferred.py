"""agent/broker/deferred.py: modules in `sys.modules` that run on first use. Each case runs
in a fresh interpreter (what has run is the point). The oracles are the standard library's
own: the same module imported normally in this test process, and `-X importtime`'s
report of what a `python -m fluxnode broker` process imported."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap


def run(code: str, *python_args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, *python_args, "-c", textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out


def test_a_deferred_module_runs_on_its_first_missing_name_and_is_the_real_one():
    out = run("""
        import sys
        from fluxnode.agent.broker.deferred import defer_unused_stdlib
        group = defer_unused_stdlib()
        import dataclasses  # imports inspect: it must find the deferred one and stop
        @dataclasses.dataclass
        class Documented:
            \"\"\"A docstring: dataclasses asks inspect nothing.\"\"\"
            x: int = 1
        print("ran", group.done, "ast" in sys.modules, "isfunction" in vars(sys.modules["inspect"]))
        import inspect
        print(inspect.signature(lambda a, b=2: None))  # a missing name: the module runs
        print("ran", group.done, "ast" in sys.modules, inspect.__spec__.origin)
        @dataclasses.dataclass
        class Bare:
            y: str = "z"
        print(Bare.__doc__)
    """).stdout.splitlines()
    assert out[0] == "ran False False False"
    assert out[1] == str(inspect.signature(lambda a, b=2: None))
    assert out[2] == f"ran True True {inspect.__spec__.origin}"
    assert out[3] == "Bare(y: str = 'z')"  # what dataclasses writes with the real inspect


def test_nothing_is_deferred_when_the_module_is_already_imported():
    out = run("""
        import inspect
        from fluxnode.agent.broker.deferred import defer_unused_stdlib
        print(defer_unused_stdlib(), inspect.signature(len))
    """).stdout
    assert out == f"None {inspect.signature(len)}\n"


def test_the_broker_command_falls_back_to_click_with_the_real_inspect():
    """`fluxnode broker --help` is answered by click, which uses `inspect`: the deferred
    module runs then, and the help is the command's own."""
    out = subprocess.run([sys.executable, "-m", "fluxnode", "broker", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--config-path" in out.stdout and "Run one broker" in out.stdout
