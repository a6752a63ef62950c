"""One logging setup for broker, node agent and binder: stderr at its level, a file at every
level."""

from __future__ import annotations

import logging

import pytest
from fluxnode.agent import logs


@pytest.fixture(autouse=True)
def _restore_fluxnode_logger():
    """setup_logging replaces the process's `fluxnode` handlers; give later tests theirs back."""
    root = logging.getLogger("fluxnode")
    saved = root.handlers[:], root.level, root.propagate
    yield
    for handler in root.handlers:
        if handler not in saved[0]:
            handler.close()
    root.handlers[:], root.level, root.propagate = saved


def test_stderr_gets_its_level_and_the_file_every_level(tmp_path, capsys):
    path = tmp_path / "broker.log"
    logs.setup_logging(logging.WARNING, logging.Formatter("%(levelname)s %(message)s"),
                       log_file=str(path))
    log = logging.getLogger("fluxnode.test")
    log.debug("quiet detail")
    log.warning("loud news")
    for handler in logging.getLogger("fluxnode").handlers:
        handler.flush()
    assert capsys.readouterr().err.splitlines() == ["WARNING loud news"]
    assert path.read_text().splitlines() == ["DEBUG quiet detail", "WARNING loud news"]


def test_without_a_file_records_under_the_level_are_not_even_made(capsys):
    logs.setup_logging("info", logs.LogfmtFormatter())
    log = logging.getLogger("fluxnode.test")
    assert not log.isEnabledFor(logging.DEBUG)
    log.debug("dropped")
    log.info("kept")
    err = capsys.readouterr().err
    assert "kept" in err and "dropped" not in err
    assert len(logging.getLogger("fluxnode").handlers) == 1
