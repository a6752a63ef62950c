"""The layout page (docs/layout.md) names every package, and only paths that exist.

A package is a folder with `__init__.py` under agent/, broker_conf/, scheduler/ or
fluxnode/ (the folders installed as `fluxnode.*`). The oracle is the file system, not the
package list in pyproject.toml, so a package added without documentation fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.paths import REPO as ROOT

LAYOUT = ROOT / "docs" / "layout.md"
PACKAGE_ROOTS = ("agent", "broker_conf", "scheduler", "fluxnode")


def table_paths(text: str) -> list[str]:
    """The first cell of every table row, when it is one backticked path."""
    paths = []
    for line in text.splitlines():
        match = re.match(r"^\|\s*`([^`]+)`\s*\|", line)
        if match:
            paths.append(match.group(1))
    return paths


def packages(root: Path) -> set[str]:
    found = set()
    for top in PACKAGE_ROOTS:
        for init in (root / top).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(init.parent.relative_to(root).as_posix() + "/")
    return found


def test_every_package_is_in_the_layout_table():
    listed = set(table_paths(LAYOUT.read_text()))
    missing = sorted(packages(ROOT) - listed)
    assert not missing, f"packages missing from docs/layout.md: {missing}"


def test_every_path_in_the_layout_table_exists():
    paths = table_paths(LAYOUT.read_text())
    assert paths, "docs/layout.md has no table of paths"
    absent = [p for p in paths if not (ROOT / p).exists()]
    assert not absent, f"docs/layout.md names paths that do not exist: {absent}"
    dirs_named_as_files = [p for p in paths if (ROOT / p).is_dir() != p.endswith("/")]
    assert not dirs_named_as_files, (
        f"write folders with a trailing / and files without: {dirs_named_as_files}"
    )


def test_the_checks_see_a_missing_and_an_extra_package(tmp_path):
    """The two checks above, on a tree made here: one package undocumented, one path stale."""
    (tmp_path / "agent" / "new").mkdir(parents=True)
    (tmp_path / "agent" / "__init__.py").write_text("")
    (tmp_path / "agent" / "new" / "__init__.py").write_text("")
    (tmp_path / "agent" / "new" / "__pycache__").mkdir()
    (tmp_path / "agent" / "new" / "__pycache__" / "__init__.py").write_text("")
    table = "| path | what |\n| --- | --- |\n| `agent/` | x |\n| `agent/gone/` | y |\n"
    assert packages(tmp_path) == {"agent/", "agent/new/"}
    assert table_paths(table) == ["agent/", "agent/gone/"]
    assert packages(tmp_path) - set(table_paths(table)) == {"agent/new/"}
    assert [p for p in table_paths(table) if not (tmp_path / p).exists()] == ["agent/gone/"]
