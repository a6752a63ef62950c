"""The broker's own logger writes the lines the `logging` package wrote before it (issue 32).

The oracle is the standard library: each line is compared with what a `logging.Formatter`
with the broker's old format makes of the same record, the timestamp aside (both are the
local time in the same format, taken a moment apart).
"""

from __future__ import annotations

import logging
import re
import sys

import pytest
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.logging_setup import setup_logging

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d ", re.M)
OLD_FORMAT = "%(asctime)s node7 broker[3]: %(levelname)s %(message)s"


def stdlib_line(level: int, msg: str, args: tuple, exc_info=None) -> str:
    fmt = logging.Formatter(OLD_FORMAT, "%Y-%m-%dT%H:%M:%S")
    record = logging.LogRecord("fluxnode.broker", level, __file__, 1, msg, args, exc_info)
    return fmt.format(record) + "\n"


def masked(text: str) -> str:
    return STAMP.sub("TIME ", text)


def test_lines_are_logging_formatters(tmp_path):
    path = tmp_path / "broker.log"
    log = setup_logging(3, "node7", {"log-stderr-level": "0", "log-filename": str(path)})
    log.info("overlay: %s (rank %d) joined%s", "node8", 8, "")
    log.debug("plain %s text")  # no args: no formatting, as logging
    log.warning("online: %s (ranks %s)", "node[0-3]", "0-3")
    log.critical("fluxnode-broker: %(what)s", {"what": "a mapping"})
    expected = [
        stdlib_line(logging.INFO, "overlay: %s (rank %d) joined%s", ("node8", 8, "")),
        stdlib_line(logging.DEBUG, "plain %s text", ()),
        stdlib_line(logging.WARNING, "online: %s (ranks %s)", ("node[0-3]", "0-3")),
        stdlib_line(logging.CRITICAL, "fluxnode-broker: %(what)s", ({"what": "a mapping"},)),
    ]
    assert masked(path.read_text()) == masked("".join(expected))
    assert len(STAMP.findall(path.read_text())) == 4


def test_exception_carries_the_traceback_as_logging_does(tmp_path):
    path = tmp_path / "broker.log"
    log = BrokerLog("node7 broker[3]: ", logging.CRITICAL, str(path))
    try:
        {}["missing"]
    except KeyError:
        log.exception("reactor: handler %r failed", "h")
        info = sys.exc_info()
    assert masked(path.read_text()) == masked(
        stdlib_line(logging.ERROR, "reactor: handler %r failed", ("h",), info))
    assert "KeyError: 'missing'" in path.read_text()


def test_stderr_gets_its_level_and_above_the_file_everything(tmp_path, capfd):
    path = tmp_path / "broker.log"
    log = BrokerLog("node7 broker[3]: ", logging.WARNING, str(path))
    log.info("only in the file")
    log.error("in both %d", 2)
    err = capfd.readouterr().err
    assert masked(err) == "TIME node7 broker[3]: ERROR in both 2\n"
    assert masked(path.read_text()) == (
        "TIME node7 broker[3]: INFO only in the file\nTIME node7 broker[3]: ERROR in both 2\n")


def test_without_a_file_below_the_stderr_level_nothing_is_formatted(capfd):
    log = BrokerLog("h broker[0]: ", logging.ERROR)

    class Exploding:
        def __str__(self) -> str:
            raise AssertionError("formatted a line nobody gets")

    log.info("%s", Exploding())
    assert not log.isEnabledFor(logging.INFO) and log.isEnabledFor(logging.ERROR)
    assert capfd.readouterr().err == ""


def test_a_bad_format_is_logged_not_raised(tmp_path):
    path = tmp_path / "broker.log"
    log = BrokerLog("h broker[0]: ", logging.CRITICAL, str(path))
    log.error("two %s %s", "one")
    assert masked(path.read_text()) == "TIME h broker[0]: ERROR two %s %s ('one',)\n"


def test_a_module_logging_through_the_stdlib_gets_the_same_lines(tmp_path):
    path = tmp_path / "broker.log"
    log = BrokerLog("node7 broker[3]: ", logging.CRITICAL, str(path))
    root = logging.getLogger("fluxnode")
    saved = root.handlers[:], root.level, root.propagate
    try:
        log.bridge_stdlib()
        logging.getLogger("fluxnode.module.sched").info("sched: %d ranks", 4)
        try:
            raise ValueError("bad journal")
        except ValueError:
            logging.getLogger("fluxnode.module.sched").debug("failed", exc_info=True)
            info = sys.exc_info()
    finally:
        root.handlers[:], root.level, root.propagate = saved
    assert masked(path.read_text()) == masked(
        stdlib_line(logging.INFO, "sched: %d ranks", (4,))
        + stdlib_line(logging.DEBUG, "failed", (), info))


def test_an_unwritable_log_file_fails_the_start(tmp_path):
    with pytest.raises(OSError, match="No such file or directory"):
        BrokerLog("h broker[0]: ", logging.ERROR, str(tmp_path / "missing" / "broker.log"))
