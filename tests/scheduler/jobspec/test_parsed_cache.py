"""ParsedJobspecs gives what Jobspec.parse gives: the same jobspec for the same text, the
same error for a refused one (never kept), and a fresh parse once a type it names is no
longer known."""

from __future__ import annotations

import pytest
import yaml
from fluxnode.scheduler.jobspec.jobspec import FLUXION_STATIC_TYPES, Jobspec, JobspecError
from fluxnode.scheduler.jobspec.parsed_cache import ParsedJobspecs


def _text(leaf: str, duration: int = 60) -> bytes:
    return yaml.safe_dump({
        "version": 1, "attributes": {"system": {"duration": duration}},
        "resources": [{"type": "slot", "count": 1, "label": "s",
                       "with": [{"type": leaf, "count": 1}]}],
        "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}).encode()


KNOWN = set(FLUXION_STATIC_TYPES)


def test_same_text_same_jobspec_as_a_fresh_parse():
    cache = ParsedJobspecs()
    text = _text("core")
    first = cache.parse(text, KNOWN)
    assert first == Jobspec.parse(text, known_types=KNOWN)
    assert cache.parse(bytes(text), KNOWN) is first  # equal bytes, another object
    assert cache.parse(_text("core", 61), KNOWN) is not first
    assert len(cache) == 2


def test_a_refused_jobspec_is_refused_each_time_and_not_kept():
    cache = ParsedJobspecs()
    text = _text("nic")
    for _ in range(2):
        with pytest.raises(JobspecError) as got:
            cache.parse(text, KNOWN)
        with pytest.raises(JobspecError) as fresh:
            Jobspec.parse(text, known_types=KNOWN)
        assert (str(got.value), got.value.what) == (str(fresh.value), fresh.value.what)
    assert len(cache) == 0


def test_a_kept_jobspec_naming_a_type_no_longer_known_is_parsed_again():
    cache = ParsedJobspecs()
    text = _text("nic")
    kept = cache.parse(text, KNOWN | {"nic"})
    assert cache.parse(text, KNOWN | {"nic", "ssd"}) is kept
    with pytest.raises(JobspecError):
        cache.parse(text, KNOWN)


def test_bounded_oldest_dropped_first_and_long_texts_not_kept():
    cache = ParsedJobspecs(max_entries=2, max_text=400)
    texts = [_text("core", d) for d in (1, 2, 3)]
    kept = [cache.parse(t, KNOWN) for t in texts]
    assert len(cache) == 2
    assert cache.parse(texts[2], KNOWN) is kept[2]
    assert cache.parse(texts[0], KNOWN) is not kept[0]  # dropped, parsed again
    long = _text("core") + b"#" + b"x" * 400 + b"\n"
    cache = ParsedJobspecs(max_text=400)
    assert cache.parse(long, KNOWN) == cache.parse(long, KNOWN)
    assert len(cache) == 0
