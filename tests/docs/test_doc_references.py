"""Every file, make target and `fluxnode` option the README and the docs name exists.

A page that names `bench/old.py`, `make kind-start` or `fluxnode start --hostname-prefix`
after they were renamed sends a reader into an error; this test fails first. What counts as
a name is read from code (backticked spans and fenced blocks), where a reader copies from.
The oracles are outside the docs and outside fluxnode's own lists: the file system, make's
own database of targets (`make -pRrq`), and the options click and argparse parse.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import click
import pytest
from support.paths import REPO

DOCS = [REPO / "README.md", REPO / "SECURITY.md", *sorted((REPO / "docs").rglob("*.md"))]

# paths a reader would resolve from the checkout's root
TOP = ("agent", "broker_conf", "templates", "scheduler", "daemonset", "example", "tests",
       "bench", "docs", "fluxnode", ".ci")
ROOT_FILES = ("Makefile", "Dockerfile", "pyproject.toml", "mkdocs.yml", "README.md",
              "SECURITY.md")
PATH_TOKEN = re.compile(
    rf"(?<![\w/.$-])((?:{'|'.join(re.escape(t) for t in TOP)})/[\w./*{{}}<>\[\]-]*"
    rf"|(?:{'|'.join(re.escape(f) for f in ROOT_FILES)}))(?![\w/-])")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(((?!https?:|#|mailto:)[^)#\s]+)")
SEPARATORS = {"|", "||", "&&", ";", "--", ">", "2>&1", "<", "&"}


def code_of(text: str) -> list[str]:
    """The code a page shows: fenced blocks, then inline spans outside them."""
    blocks = FENCE.findall(text)
    prose = FENCE.sub("", text)
    return blocks + SPAN.findall(prose)


def doc_items(pattern_fn) -> list[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for doc in DOCS:
        for code in code_of(doc.read_text()):
            for item in pattern_fn(code):
                found.add((doc.relative_to(REPO).as_posix(), item))
    return sorted(found)


# -- files ---------------------------------------------------------------------------------
def paths_in(code: str) -> list[str]:
    out = []
    for token in PATH_TOKEN.findall(code):
        token = token.rstrip(".,:;)]")  # punctuation after a name, as in prose
        if re.search(r"[<>{}]|\[\w", token):  # a placeholder: bench/<name>.py, {{rank}}
            continue
        last = token.rstrip("/").rsplit("/", 1)[-1]
        if not (token.endswith("/") or "." in last or "*" in last or token in ROOT_FILES
                or (REPO / token).is_dir()):
            continue  # not a file's name: daemonset/fluxnode-agent, fluxnode/fluxnode-ranks
        out.append(token)
    return out


def link_targets(doc: Path) -> list[str]:
    """Relative links of a page, as paths from the checkout's root."""
    out = []
    for target in LINK.findall(doc.read_text()):
        resolved = (doc.parent / target).resolve()
        out.append(resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO)
                   else str(resolved))
    return out


FILES = doc_items(paths_in) + sorted(
    {(d.relative_to(REPO).as_posix(), t) for d in DOCS for t in link_targets(d)})


def test_the_docs_name_files():
    assert len(FILES) >= 50, FILES


@pytest.mark.parametrize(("doc", "path"), FILES, ids=[f"{d}:{p}" for d, p in FILES])
def test_every_named_file_exists(doc: str, path: str):
    matches = list(REPO.glob(path)) if "*" in path else [REPO / path]
    assert matches and all(m.exists() for m in matches), f"{doc} names {path}, which does not exist"


# -- make targets --------------------------------------------------------------------------
def make_goals(code: str) -> list[str]:
    out = []
    code = re.sub(r"(^|\s)#[^\n]*", r"\1", code)  # a shell comment is prose
    for m in re.finditer(r"(?:^|[\s`(;&|])make((?:[ \t]+[A-Za-z][\w.-]*(?:=\S*)?)+)", code):
        for word in m.group(1).split():
            if "=" not in word and not word.startswith("-"):
                out.append(word)
    return out


@cache
def make_targets() -> set[str]:
    """Every target make itself knows in the Makefile (its database, rules not run)."""
    done = subprocess.run(["make", "-pRrq", "-f", "Makefile", ":"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    targets = set()
    for line in done.stdout.splitlines():
        m = re.match(r"^([A-Za-z][\w.-]*):(?!=)", line)
        if m:
            targets.add(m.group(1))
    return targets


GOALS = doc_items(make_goals)


def test_the_docs_name_make_targets():
    assert {"demo", "test", "docs"} <= {goal for _, goal in GOALS}
    assert {"demo", "test", "check-nothing"} - make_targets() == {"check-nothing"}


@pytest.mark.parametrize(("doc", "goal"), GOALS, ids=[f"{d}:{g}" for d, g in GOALS])
def test_every_named_make_target_exists(doc: str, goal: str):
    assert goal in make_targets(), f"{doc} names `make {goal}`, which the Makefile does not have"


# -- fluxnode options ----------------------------------------------------------------------
def fluxnode_uses(code: str) -> list[str]:
    """`fluxnode SUB [SUB] --opt ...` as written: one item a use, up to a shell separator (a
    use inside another, `fluxnode proxy URI fluxnode ping -c 3 0`, is an item too)."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*", "", line)  # a shell comment is prose
        for m in re.finditer(r"(?:^|(?<=[\s'\"`(;&|$]))fluxnode\s+(?=([a-z][^|;&)'\"`]*))", line):
            if re.search(r"(?:-n|--namespace)[\s=]+$", line[:m.start()]):
                continue  # kubectl -n fluxnode ...: a namespace
            if re.search(r"kubectl\s+$", line[:m.start()]):
                continue  # kubectl fluxnode ...: the kubectl plugin (argparse, not click)
            words = []
            for word in m.group(1).split():
                if word in SEPARATORS:
                    break
                words.append(word)
            if words and re.fullmatch(r"[a-z][a-z-]*", words[0]):  # not `fluxnode agent: ...`
                out.append(" ".join(words))
    return out


def command_for(words: list[str]) -> tuple[click.Command | None, list[str]]:
    """The click command the words name and the words left for its options."""
    from fluxnode.cli import main

    ctx = click.Context(main)
    command: click.Command = main
    rest = list(words)
    while isinstance(command, click.Group) and rest:
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            return None, rest
        command, rest = sub, rest[1:]
    return command, rest


def _click_options(command: click.Command) -> tuple[dict[str, bool], bool]:
    """Each option string -> whether it takes a value; and whether the command's arguments
    end its options (a COMMAND... passed through, as `exec` and `proxy` take)."""
    takes: dict[str, bool] = {"-h": False, "--help": False}
    passes_through = False
    for p in command.params:
        if isinstance(p, click.Option):
            value = not (p.is_flag or p.count)
            for opt in (*p.opts, *p.secondary_opts):
                takes[opt] = value
        elif p.nargs == -1 or isinstance(p.type, type(click.UNPROCESSED)):
            passes_through = True
    return takes, passes_through


def unknown_options(use: str) -> list[str]:
    command, rest = command_for(use.split())
    if command is None:
        return [f"no command {use.split()[0]!r}"]
    if command.name == "resource-query":
        from fluxnode.scheduler.resource_query.command import _parser

        takes = {s: a.nargs != 0 for a in _parser()._actions for s in a.option_strings}
        passes_through = False
    else:
        takes, passes_through = _click_options(command)
    bad = []
    words = iter(rest)
    for word in words:
        if not word.startswith("-") or word == "-" or re.fullmatch(r"-\d[\d.]*", word):
            if passes_through:
                break  # COMMAND [ARGS]: its own options follow
            continue
        name = word.split("=", 1)[0]
        if name.startswith("--") or len(name) == 2:
            if name not in takes:
                bad.append(name)
            elif takes[name] and "=" not in word:
                next(words, None)
        elif not all(f"-{c}" in takes for c in name[1:]):  # clustered short flags: -vv, -lr
            bad.append(name)
    return bad


USES = [(d, u) for d, u in doc_items(fluxnode_uses) if u]


def test_the_docs_show_fluxnode_commands():
    shown = {use.split()[0] for _, use in USES}
    assert {"start", "resource", "alloc", "ping", "exec", "resource-query"} <= shown, shown


def test_an_option_that_does_not_exist_is_found():
    """The check itself, on uses written here: a real option passes, a made-up one fails."""
    assert unknown_options("start --test-size 2 --test-hosts n[0-1]") == []
    assert unknown_options("start --test-size 2 --hostname-prefix n") == ["--hostname-prefix"]
    assert unknown_options("resource drain -f 1 x") == []
    assert unknown_options("resource-query -L g.graphml -P high --no-such") == ["--no-such"]
    assert unknown_options("exec -r 0,2 -l sh -c x") == []
    assert unknown_options("exec -r 0,2 --each sh -c x") == ["--each"]
    assert unknown_options("nosuch --x") == ["no command 'nosuch'"]


@pytest.mark.parametrize(("doc", "use"), USES, ids=[f"{d}:{u}" for d, u in USES])
def test_every_named_option_exists(doc: str, use: str):
    assert unknown_options(use) == [], f"{doc} shows `fluxnode {use}`"


def plugin_commands(code: str) -> list[str]:
    """The command word of each `kubectl fluxnode COMMAND ...` as written."""
    flags = r"(?:(?:-n|--namespace|--context|--kubeconfig)[\s=]+\S+\s+|-A\s+)*"
    return re.findall(rf"kubectl\s+fluxnode\s+{flags}([a-z][a-z-]*)", code)


PLUGIN_USES = doc_items(plugin_commands)


def test_the_docs_show_kubectl_plugin_commands():
    assert {u for _, u in PLUGIN_USES} >= {"queue", "why"}


@pytest.mark.parametrize(("doc", "command"), PLUGIN_USES,
                         ids=[f"{d}:{c}" for d, c in PLUGIN_USES])
def test_every_kubectl_plugin_command_exists(doc: str, command: str):
    """The plugin (fluxnode/commands/kubectl_plugin.py) is argparse: its subparsers' names."""
    import argparse

    from fluxnode.commands.kubectl_plugin import _parser

    [sub] = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert command in sub.choices, f"{doc} shows `kubectl fluxnode {command}`"


# -- the reading table ---------------------------------------------------------------------
def test_the_home_pages_reading_table_names_every_page_of_the_site():
    """docs/index.md's "Where to read on" leaves no page of mkdocs.yml's nav out (it left out
    exec, archive and fault tolerance). The oracle is the nav, read with PyYAML."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    nav = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=Loader)["nav"]

    def pages(entries) -> set[str]:
        out = set()
        for entry in entries:
            for value in entry.values():
                out |= pages(value) if isinstance(value, list) else {value}
        return out

    index = (REPO / "docs/index.md").read_text().split("## Where to read on", 1)[1]
    linked = set(re.findall(r"\]\(([\w/.-]+\.md)", index))
    assert pages(nav) - {"index.md"} - linked == set()


def test_the_conformance_counts_are_stated_in_one_place():
    """How many of Fluxion's cases pass is said on the scheduler page alone; other pages link
    there (the README and the benchmarks said 1,999 of 2,014 after it became 2,014)."""
    count = re.compile(r"\b\d[\d,]* ?(?:/|of) ?(?:2,014|314)\b|\b(?:1,999|2,014) random\b")
    elsewhere = [f"{doc.relative_to(REPO)}: {m.group(0)}" for doc in DOCS
                 if doc.name != "scheduler.md" for m in count.finditer(doc.read_text())]
    assert elsewhere == []
    assert count.search((REPO / "docs/scheduler.md").read_text())


def test_commands_use_no_path_of_this_projects_own_machines():
    """A reader's checkout is not /work/main: commands run from the checkout (`$PWD`,
    `../shared` beside it), never through `../../main` or `/work/` (benchmarks.md did)."""
    own = re.compile(r"/work/|\.\./\.\./main\b|/path/to/main\b")
    found = [f"{doc.relative_to(REPO)}: {m.group(0)}" for doc in DOCS
             if "developers" not in doc.parts for code in code_of(doc.read_text())
             for m in own.finditer(code)]
    assert found == []
