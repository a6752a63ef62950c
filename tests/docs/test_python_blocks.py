"""The imports of every ```python block in README.md and docs/ resolve.

The blocks are sketches of an API (they use names such as `R` that the reader brings), so
they are not run whole; but every `from X import Y` / `import X` line in them is executed,
so a module that moves or a name that is renamed breaks this test, not the reader.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
from support.paths import REPO as ROOT

DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_imports(path: Path) -> list[tuple[int, str]]:
    found, inside = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip().startswith("```"):
            inside = line.strip() == "```python" if not inside else False
            continue
        if inside and re.match(r"^(from \S+ import |import )", line):
            found.append((number, line.split("#")[0].strip()))
    return found


IMPORTS = [(path, number, line) for path in DOC_FILES for number, line in python_imports(path)]


def test_the_docs_have_python_imports():
    assert len(IMPORTS) >= 5


@pytest.mark.parametrize("path, number, line", IMPORTS,
                         ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in IMPORTS])
def test_python_block_import_resolves(path: Path, number: int, line: str):
    match = re.match(r"^from (\S+) import (.+)$", line)
    if match is None:
        importlib.import_module(line.removeprefix("import ").strip())
        return
    module = importlib.import_module(match.group(1))
    for name in (n.strip() for n in match.group(2).strip("()").split(",")):
        assert hasattr(module, name) or importlib.util.find_spec(f"{match.group(1)}.{name}"), (
            f"{path.relative_to(ROOT)}:{number}: {match.group(1)} has no {name}")
