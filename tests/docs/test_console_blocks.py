"""Every ```console block of README.md and docs/ runs as shown.

A console block is a transcript: a line `$ COMMAND` (continued by a trailing `\\`, or while
a quoted string is open, as in a `sh -c '...'` script over several lines) is run,
the lines after it up to the next `$ ` are the output it must print (stdout and stderr
together). The comparison is exact except for `...`: a line that is only `...` stands for
any number of lines, and `...` inside a line stands for any text, for what varies from run
to run (times, pids). A last output line `[N]` says the command exits with status N; without
it the command must exit 0, so an example that fails cannot pass for one that works.

Commands run one by one with `bash -c`, in a fresh directory holding links to the
checkout's `example/` and `bench/` (so examples name them as a reader in the checkout
would, and whatever they write lands in the temp dir), with the running interpreter's
`bin/` first on PATH (so `fluxnode` and `.venv/bin/python` are the installed ones).

Examples that cannot run here (a Kubernetes cluster, /etc/fluxnode, an SSH host, long
benchmarks) are written as ```sh or ```text blocks, which this test does not run; the
docs' "Tests" page says so.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.paths import REPO as ROOT

DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND_TIMEOUT = 180


@dataclass
class Step:
    command: str
    expected: list[str]
    status: int
    line: int


@dataclass
class Block:
    path: Path
    line: int
    steps: list[Step]

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def console_blocks(path: Path) -> list[Block]:
    """The ```console blocks of one Markdown file, parsed into steps."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        start = i + 1
        body: list[tuple[int, str]] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append((i + 1, lines[i]))
            i += 1
        blocks.append(Block(path, start, parse_steps(body)))
        i += 1
    return blocks


def titled_blocks(path: Path, fence: str) -> list[Block]:
    """The blocks of one Markdown file opened by exactly `fence` (```console with a title,
    run by a test of its own against Kubernetes), parsed into steps, in the page's order."""
    text = path.read_text()
    blocks = []
    for match in re.finditer(re.escape(fence) + r"\n(.*?)^```$", text, re.M | re.S):
        first = text.count("\n", 0, match.start(1)) + 1
        body = list(enumerate(match.group(1).splitlines(), start=first))
        blocks.append(Block(path, first - 1, parse_steps(body)))  # the fence line, as there
    return blocks


def parse_steps(body: list[tuple[int, str]]) -> list[Step]:
    steps: list[Step] = []
    k = 0
    while k < len(body):
        lineno, text = body[k]
        if not text.startswith("$ "):
            raise ValueError(f"line {lineno}: output before any `$ ` command: {text!r}")
        command = text[2:]
        while (command.endswith("\\") or not _quotes_closed(command)) and k + 1 < len(body):
            k += 1
            command = command + "\n" + body[k][1]
        expected: list[str] = []
        k += 1
        while k < len(body) and not body[k][1].startswith("$ "):
            expected.append(body[k][1])
            k += 1
        status = 0
        if expected and re.fullmatch(r"\[\d+\]", expected[-1]):
            status = int(expected.pop()[1:-1])
        steps.append(Step(command, expected, status, lineno))
    return steps


def _quotes_closed(command: str) -> bool:
    """False while a quoted string runs on (a `sh -c '...'` script over several lines)."""
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def _line_regex(expected: str) -> str:
    return ".*".join(re.escape(part) for part in expected.split("..."))


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Exact line match, `...` lines matching any run of lines, `...` in a line any text."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line.strip() == "..." else _line_regex(line.rstrip()) + r"[ \t]*\n"
        for line in expected
    )
    return re.fullmatch(pattern, "".join(line.rstrip() + "\n" for line in actual)) is not None


def run_step(step: Step, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("FLUXNODE_URI", None)
    env["COLUMNS"] = "100"
    return subprocess.run(
        ["bash", "-c", step.command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
        timeout=COMMAND_TIMEOUT,
    )


ALL_BLOCKS = [block for path in DOC_FILES for block in console_blocks(path)]


def test_the_docs_have_console_blocks():
    """The runner finds the examples (a renamed fence would otherwise skip them all)."""
    assert len(ALL_BLOCKS) >= 5, [b.id for b in ALL_BLOCKS]


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.id for b in ALL_BLOCKS])
def test_console_block_runs_as_shown(block: Block, tmp_path: Path):
    venv = Path(sys.prefix)
    for name, target in (("example", ROOT / "example"), ("bench", ROOT / "bench"), (".venv", venv)):
        (tmp_path / name).symlink_to(target)
    for step in block.steps:
        done = run_step(step, tmp_path)
        actual = done.stdout.splitlines()
        where = f"{block.path.relative_to(ROOT)}:{step.line}: $ {step.command}"
        assert done.returncode == step.status, (
            f"{where}\nexit status {done.returncode}, expected {step.status}\n{done.stdout}")
        if step.expected:
            assert output_matches(step.expected, actual), (
                f"{where}\n--- expected\n" + "\n".join(step.expected)
                + "\n--- got\n" + done.stdout)


# The matcher itself, against outputs chosen here (not produced by the code under test).
@pytest.mark.parametrize("expected, actual, ok", [
    (["a", "b"], ["a", "b"], True),
    (["a", "b"], ["a", "c"], False),
    (["a"], ["a", "b"], False),
    (["a", "..."], ["a", "b", "c"], True),
    (["...", "c"], ["a", "b", "c"], True),
    (["...", "c"], ["a", "b"], False),
    (["time=... ms"], ["time=0.611 ms"], True),
    (["time=... ms"], ["time=0.611 s"], False),
    (["x (y)"], ["x (y)"], True),
    (["x (y)"], ["x y"], False),
])
def test_output_matcher(expected, actual, ok):
    assert output_matches(expected, actual) is ok


def test_parse_steps_reads_status_and_continuations():
    steps = parse_steps(
        [
            (1, "$ false \\"),
            (2, "  --flag"),
            (3, "[1]"),
            (4, "$ echo hi"),
            (5, "hi"),
            (6, "$ sh -c 'echo a"),
            (7, "  echo b'"),
            (8, "a"),
            (9, "b"),
        ]
    )
    assert [(s.command, s.expected, s.status) for s in steps] == [
        ("false \\\n  --flag", [], 1),
        ("echo hi", ["hi"], 0),
        ("sh -c 'echo a\n  echo b'", ["a", "b"], 0),
    ]
