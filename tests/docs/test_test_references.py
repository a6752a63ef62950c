"""Every test the README and the docs name (`tests/PATH.py::test_name`) exists.

The README's operations section says what fluxnode does on a cordon, drain, taint, node
deletion, NotReady, the loss of rank 0 and an upgrade, each with the test that shows it; a
renamed or deleted test must not leave a claim without its proof. The oracle is the test
file's own source (a `def test_name(` in it), not a list kept here."""

from __future__ import annotations

import re

import pytest
from support.paths import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def references() -> list[tuple[str, str, str]]:
    found = []
    for doc in DOCS:
        for path, name in REFERENCE.findall(doc.read_text()):
            found.append((doc.relative_to(REPO).as_posix(), path, name))
    return found


def test_the_readme_names_its_proofs():
    named = {name for doc, _, name in references() if doc == "README.md"}
    assert len(named) >= 10, "the README's operations section names the tests behind it"


@pytest.mark.parametrize(("doc", "path", "name"), references(),
                         ids=[f"{d}:{n}" for d, _, n in references()])
def test_every_named_test_exists(doc, path, name):
    source = REPO / path
    assert source.is_file(), f"{doc} names {path}, which does not exist"
    assert re.search(rf"^def {name}\(", source.read_text(), re.M), (
        f"{doc} names {path}::{name}, which is not defined there"
    )
