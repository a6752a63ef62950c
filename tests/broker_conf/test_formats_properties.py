"""Property tests for the broker_conf parsers (issue 11): hostlist, idset, FSD, topology
and broker.toml never raise anything but their documented error, and round-trip."""

from __future__ import annotations

import math

from fluxnode.broker_conf import config, fsd, hostlist, idset, topology
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import PROFILE

IDSET_ALPHABET = "0123456789-,[] x+"
HOSTLIST_ALPHABET = "abn0123456789-,[]._ \t\u00e9"


@PROFILE
@given(st.text(IDSET_ALPHABET, max_size=40) | st.text(max_size=20))
def test_idset_decode_raises_only_idset_error(text):
    try:
        ids = idset.decode(text)
    except idset.IdsetError:
        return
    assert ids == sorted(set(ids)) and all(i >= 0 for i in ids)
    assert idset.decode(idset.encode(ids)) == ids


@PROFILE
@given(st.sets(st.integers(0, 10**6), max_size=50), st.booleans())
def test_idset_round_trips(ids, brackets):
    text = idset.encode(ids, brackets=brackets)
    assert idset.decode(text) == sorted(ids)
    assert idset.count(idset.decode_ranges(text)) == len(ids)


@PROFILE
@given(st.text(IDSET_ALPHABET, max_size=40), st.integers(0, 100))
def test_idset_limit_is_exact(text, limit):
    try:
        full = idset.decode(text)
    except idset.IdsetError:
        return
    try:
        assert idset.decode(text, limit=limit) == full and len(full) <= limit
    except idset.IdsetError as exc:
        assert len(full) > limit and "exceeds" in str(exc)


@PROFILE
@given(st.text(HOSTLIST_ALPHABET, max_size=40))
def test_hostlist_decode_raises_only_hostlist_error(text):
    try:
        hosts = hostlist.decode(text)
    except hostlist.HostlistError:
        return
    assert hostlist.count(text) == len(hosts)
    m = hostlist.Matcher(text)
    assert all(h in m for h in hosts)
    if hosts:
        assert hostlist.decode(hostlist.encode(hosts)) == hosts


HOSTNAME = st.from_regex(r"[a-z]{1,4}[0-9]{0,3}(-[a-z0-9]{1,3})?", fullmatch=True)


@PROFILE
@given(st.lists(HOSTNAME, max_size=30))
def test_hostlist_round_trips(hosts):
    assert hostlist.decode(hostlist.encode(hosts)) == hosts


@PROFILE
@given(st.text(HOSTLIST_ALPHABET, max_size=30), HOSTNAME)
def test_matcher_agrees_with_decode(text, name):
    try:
        hosts = hostlist.decode(text)
    except hostlist.HostlistError:
        return
    assert (name in hostlist.Matcher(text)) == (name in hosts)


@PROFILE
@given(st.one_of(st.text("0123456789.eE+-msdhinfty ", max_size=16), st.text(max_size=10),
                 st.floats(), st.integers(), st.booleans(), st.none()))
def test_fsd_parse_raises_only_fsd_error(value):
    try:
        seconds = fsd.parse(value)
    except fsd.FSDError:
        return
    assert seconds >= 0 and not math.isnan(seconds)
    assert fsd.parse(fsd.format(seconds)) == seconds


@PROFILE
@given(st.floats(min_value=0, allow_nan=False))
def test_fsd_format_round_trips(seconds):
    text = fsd.format(seconds)
    assert fsd.parse(text) == seconds


TOPO_SPEC = st.one_of(
    st.sampled_from(["binomial", "custom", "mincrit", "kary", "kary:", "mincrit:"]),
    st.builds(lambda k: f"kary:{k}", st.integers(0, 2000)), st.just("kary:1"),
    st.builds(lambda n: "kary:" + "1" * n, st.integers(4000, 5000)),
    st.builds(lambda k: f"mincrit:{k}", st.integers(0, 2000)),
    st.text("abcdikmnorty:0123456789", max_size=12),
)


@PROFILE
@given(TOPO_SPEC, st.integers(-2, 3000))
def test_topology_is_a_tree_or_topology_error(spec, size):
    try:
        t = topology.Topology.from_spec(spec, size)
    except topology.TopologyError:
        return
    assert t.size == size and t.parent(0) is None
    assert sorted(t.subtree(0)) == list(range(size))
    for r in range(1, size):
        assert r in t.children(t.parent(r))
        assert t.level(r) == t.level(t.parent(r)) + 1
    tree = t.json_subtree(0)
    assert tree["size"] == size


@PROFILE
@given(st.integers(1, 40), st.dictionaries(st.integers(-3, 45), st.integers(-3, 45)
                                           | st.text(max_size=2) | st.none(), max_size=45))
def test_custom_topology_raises_only_topology_error(size, parents):
    try:
        t = topology.Topology.from_spec("custom", size, parents)
    except topology.TopologyError:
        return
    assert sorted(t.subtree(0)) == list(range(size))


TOML_FRAGMENTS = [
    "[bootstrap]\n", "[tbon]\n", "[resource]\n", "[access]\n", "[[bootstrap.hosts]]\n",
    'host = "node[0-3]"\n', 'host = "n1"\n', "default_port = 8050\n", "default_port = 99999\n",
    'default_bind = "tcp://eth0:%p"\n', 'default_connect = "tcp://%h:%p"\n',
    'curve_cert = "/etc/cert"\n', 'topo = "kary:2"\n', 'topo = "kary:x"\n',
    'torpid_max = "30s"\n', 'torpid_max = "0s"\n', 'torpid_max = "1e999s"\n',
    'tcp_user_timeout = -1\n', 'parent = "n1"\n', 'bind = "tcp://127.0.0.1:99999"\n',
    'exclude = "0-16777215"\n', 'exclude = "node[0-99999999]"\n', "hosts = 7\n",
    'host = "' + "[" * 50 + '"\n', "zmqdebug = 1\n", "child_rcvhwm = -5\n", "x = 1\n",
]


@PROFILE
@given(st.lists(st.sampled_from(TOML_FRAGMENTS), max_size=12) | st.text(max_size=60))
def test_broker_toml_raises_only_config_error(parts):
    text = "".join(parts) if isinstance(parts, list) else parts
    try:
        cfg = config.loads(text)
    except config.ConfigError:
        return
    assert cfg.size >= 0
