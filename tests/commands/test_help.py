"""`fluxnode --help` and every command's help: the top level imports no command, each
summary is the command's own one-line help, whole and on one line at 80 columns, and every
option says what it does."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import click
import pytest

from fluxnode.cli import COMMANDS, main

OWNED_ELSEWHERE: dict[str, str] = {
    # A command whose docstring its owner has yet to bring to the map's summary, with why
    # (a strict xfail, so it fails once the docstring matches and the entry must go).
}


def help_output(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUXNODE_")}
    r = subprocess.run([sys.executable, "-m", "fluxnode", *args, "--help"], capture_output=True,
                       text=True, timeout=60, env={**env, "COLUMNS": "80"})
    assert r.returncode == 0 and r.stderr == "", r
    return r.stdout


def command_rows(text: str) -> list[list[str]]:
    """The Commands section as rows: [name, text, continuation lines...] (the help's own
    layout, parsed here: a row starts two spaces in, a continuation further in)."""
    section = text.split("\nCommands:\n", 1)[1]
    rows: list[list[str]] = []
    for line in section.splitlines():
        if not line.strip():
            break
        m = re.fullmatch(r"  (\S+)  +(.*)", line)
        if m:
            rows.append([m[1], m[2]])
        else:
            assert line.startswith("    ") and rows, line
            rows[-1].append(line.strip())
    return rows


def load(name: str) -> click.Command:
    command = main.get_command(click.Context(main), name)
    assert command is not None
    return command


def walk(command: click.Command, path: str):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from walk(sub, f"{path} {name}")


def all_commands() -> list[tuple[str, click.Command]]:
    return [pair for name in sorted(COMMANDS) for pair in walk(load(name), name)]


def test_top_level_help_imports_no_command():
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "fluxnode", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "click" in imported  # the log is read right
    assert {m for m in imported if m.split(".")[0] == "fluxnode"} == {"fluxnode", "fluxnode.cli"}


def test_top_level_help_lists_every_summary_whole_on_one_line():
    rows = command_rows(help_output())
    assert rows == [[name, entry.summary] for name, entry in sorted(COMMANDS.items())
                    if not entry.hidden]
    for name, summary in rows:
        assert summary.endswith(".") and not summary.endswith("..."), (name, summary)


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=OWNED_ELSEWHERE[name]))
    if name in OWNED_ELSEWHERE else name
    for name in sorted(COMMANDS)
])
def test_summary_is_the_commands_own_short_help(name):
    command = load(name)
    assert (command.get_short_help_str(limit=1000), command.hidden) == (
        COMMANDS[name].summary, COMMANDS[name].hidden)


GROUPS = [path for path, command in all_commands() if isinstance(command, click.Group)]


@pytest.mark.parametrize("path", GROUPS)
def test_group_help_lists_each_subcommands_whole_summary_on_one_line(path):
    group = dict(all_commands())[path]
    rows = command_rows(help_output(*path.split()))
    expected = [[name, sub.get_short_help_str(limit=1000)]
                for name, sub in sorted(group.commands.items()) if not sub.hidden]
    assert rows == expected
    for name, summary in rows:
        assert summary.endswith(".") and not summary.endswith("..."), (name, summary)


@pytest.mark.parametrize("path", [path for path, _ in all_commands()])
def test_every_option_says_what_it_does(path):
    command = dict(all_commands())[path]
    bare = [param.opts[0] for param in command.params
            if isinstance(param, click.Option) and not param.hidden and not param.help]
    assert bare == []
