"""Kubernetes' Time and MicroTime texts (agent/kube/timestamps.py), read back with the
standard library's RFC 3339 parser as the oracle."""

from __future__ import annotations

import datetime
import re

from fluxnode.agent.kube.timestamps import micro_time_now, stamps, time_now

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _parse(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def test_both_texts_name_the_instant_given() -> None:
    # instants within a second, at its start, and just before the next one
    for now in (1795884191.250001, 0.0, 1795884191.0, 1795884191.9999999, 86399.5):
        second, micro = stamps(now)
        assert TIME.fullmatch(second), second
        assert MICRO_TIME.fullmatch(micro), micro
        want = datetime.datetime.fromtimestamp(now, datetime.UTC)
        assert _parse(second) == want.replace(microsecond=0)
        # the microseconds are the instant's, truncated (never rounded into the next second)
        assert abs((_parse(micro) - want).total_seconds()) < 2e-6
        assert _parse(micro).replace(microsecond=0) == _parse(second)


def test_the_kept_second_follows_the_clock() -> None:
    # the second's text is kept between calls: a later second must not reuse it
    t = datetime.datetime(2026, 11, 27, 16, 43, 11, tzinfo=datetime.UTC).timestamp()
    a = stamps(t + 0.5)[0]
    b = stamps(t + 1.25)[0]
    c = stamps(t + 0.75)[0]
    assert (a, b, c) == ("2026-11-27T16:43:11Z", "2026-11-27T16:43:12Z", "2026-11-27T16:43:11Z")


def test_now_is_now() -> None:
    before = datetime.datetime.now(datetime.UTC)
    second, micro = time_now(), micro_time_now()
    after = datetime.datetime.now(datetime.UTC)
    assert TIME.fullmatch(second) and MICRO_TIME.fullmatch(micro)
    assert before.replace(microsecond=0) <= _parse(second) <= after
    assert before <= _parse(micro) <= after
