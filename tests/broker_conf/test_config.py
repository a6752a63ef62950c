"""broker.toml model: loading, Flux semantics, round trips and error messages."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fluxnode.broker_conf import config
from fluxnode.broker_conf.config import ConfigError

FLUX_EXAMPLE = """
[bootstrap]
curve_cert = "/etc/flux/system/curve.cert"
default_port = 8050
default_bind = "tcp://en0:%p"
default_connect = "tcp://e%h:%p"

[[bootstrap.hosts]]
host = "test[0-255]"
[[bootstrap.hosts]]
host = "test[1,128]"
parent = "test0"
[[bootstrap.hosts]]
host = "test[2-127]"
parent = "test1"
[[bootstrap.hosts]]
host = "test[129-255]"
parent = "test128"
"""


def write(tmp_path: Path, text: str, name: str = "broker.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_flux_three_level_example(tmp_path):
    cfg = config.load(write(tmp_path, FLUX_EXAMPLE))
    assert cfg.size == 256
    assert cfg.hostnames[:3] == ["test0", "test1", "test2"]
    assert cfg.rank_of("test128") == 128
    assert cfg.bind_uri(5) == "tcp://en0:8050"
    assert cfg.connect_uri(5) == "tcp://etest5:8050"
    topo = cfg.topology()
    assert topo.children(0) == [1, 128]
    assert topo.parent(2) == 1 and topo.parent(255) == 128
    assert topo.maxlevel == 2
    assert cfg.path == tmp_path / "broker.toml"


def test_explicit_entries_and_defaults(tmp_path):
    cfg = config.load(write(tmp_path, """
        [bootstrap]
        curve_cert = "/c"
        hosts = [
            { host = "foo", bind = "tcp://eth0:9001", connect = "tcp://10.0.1.1:9001" },
            { host = "bar", bind = "tcp://*:9001", connect = "tcp://bar:9001" },
        ]
    """))
    assert cfg.rank_of("foo") == 0 and cfg.rank_of("bar") == 1
    assert cfg.bind_uri(0) == "tcp://eth0:9001"
    assert cfg.connect_uri(0) == "tcp://10.0.1.1:9001"
    # flux defaults: custom topology (rank 0 parents everyone), documented tbon defaults
    assert cfg.tbon.topo == "custom"
    assert cfg.topology().parents == (None, 0)
    assert (
        cfg.tbon.torpid_min,
        cfg.tbon.torpid_max,
        cfg.tbon.tcp_user_timeout,
        cfg.tbon.connect_timeout,
    ) == (5.0, 30.0, 20.0, 30.0)
    assert cfg.access == config.AccessConfig(False, False)


def test_empty_config_is_single_broker(tmp_path):
    cfg = config.load(write(tmp_path, ""))
    assert cfg.size == 1 and cfg.hostnames == [] and cfg.rank_of("anything") == 0
    assert cfg.topology().size == 1


def test_all_tables(tmp_path):
    cfg = config.load(write(tmp_path, """
        [bootstrap]
        curve_cert = "/c"
        default_port = 9000
        default_bind = "tcp://0.0.0.0:%p"
        default_connect = "tcp://%h:%p"
        enable_ipv6 = true
        hosts = [{ host = "kind-control-plane,kind-worker,kind-worker[2-4]" }]
        [tbon]
        topo = "kary:2"
        tcp_user_timeout = "2m"
        connect_timeout = "1.5s"
        torpid_min = "10s"
        torpid_max = "0"
        zmqdebug = 1
        child_rcvhwm = 10
        prefertcp = true
        interface-hint = "eth0"
        [resource]
        path = "/etc/flux/system/R"
        scheduling = "/etc/flux/system/jgf.json"
        exclude = "kind-control-plane"
        noverify = true
        norestrict = true
        override = "/tmp/res.json"
        [access]
        allow-guest-user = true
        allow-root-owner = true
    """))
    assert cfg.hostnames == [
        "kind-control-plane",
        "kind-worker",
        "kind-worker2",
        "kind-worker3",
        "kind-worker4",
    ]
    assert cfg.connect_uri(3) == "tcp://kind-worker3:9000"
    assert cfg.tbon == config.TbonConfig("kary:2", 120.0, 1.5, 10.0, 0.0, 1, 10, True, "eth0")
    assert cfg.excluded_ranks() == [0]
    assert cfg.resource.override == "/tmp/res.json"
    assert cfg.access.allow_guest_user and cfg.access.allow_root_owner
    assert cfg.topology().parents == (None, 0, 0, 1, 1)
    again = config.loads(cfg.dumps())
    assert again == cfg


def test_round_trip_flux_example(tmp_path):
    cfg = config.load(write(tmp_path, FLUX_EXAMPLE))
    text = config.dumps(cfg)
    path = write(tmp_path, text, "again.toml")
    assert config.load(path) == cfg


def test_exclude_idset(tmp_path):
    cfg = config.load(write(tmp_path, FLUX_EXAMPLE + '\n[resource]\nexclude = "0,250-255"\n'))
    assert cfg.excluded_ranks() == [0, 250, 251, 252, 253, 254, 255]


def test_directory_merge(tmp_path):
    d = tmp_path / "conf.d"
    d.mkdir()
    write(
        d,
        '[bootstrap]\ncurve_cert = "/c"\ndefault_port = 1\ndefault_bind = "tcp://*:%p"\n',
        "a.toml",
    )
    write(
        d, '[bootstrap]\ndefault_connect = "tcp://%h:%p"\nhosts = [{host = "n[0-2]"}]\n', "b.toml"
    )
    write(d, '[tbon]\ntopo = "binomial"\n', "c.toml")
    write(d, "not toml, ignored", "README")
    cfg = config.load(d)
    assert cfg.size == 3 and cfg.tbon.topo == "binomial" and cfg.connect_uri(2) == "tcp://n2:1"


def test_directory_duplicate_key_names_both_files(tmp_path):
    d = tmp_path / "conf.d"
    d.mkdir()
    write(d, "[tbon]\ntopo = \"kary:2\"\n", "a.toml")
    write(d, "[tbon]\ntopo = \"binomial\"\n", "b.toml")
    with pytest.raises(ConfigError) as exc:
        config.load(d)
    assert exc.value.file == str(d / "b.toml") and exc.value.key == "tbon.topo"
    assert str(d / "a.toml") in str(exc.value)


def test_directory_error_names_the_file_with_the_key(tmp_path):
    d = tmp_path / "conf.d"
    d.mkdir()
    write(d, '[bootstrap]\ncurve_cert = "/c"\n', "a.toml")
    write(d, "[tbon]\ntorpid_max = \"soon\"\n", "z.toml")
    with pytest.raises(ConfigError) as exc:
        config.load(d)
    assert exc.value.file == str(d / "z.toml") and exc.value.key == "tbon.torpid_max"


BASE = (
    '[bootstrap]\ncurve_cert = "/c"\ndefault_port = 8050\ndefault_bind = "tcp://*:%p"\n'
    'default_connect = "tcp://%h:%p"\n'
)

ERRORS = [
    # (toml text, dotted key, problem fragment)
    (
        BASE + "hosts = [{host = \"a\"}, {host = \"b\"}, {host = \"c\", parent = \"zz\"}]",
        "bootstrap.hosts[2].parent",
        "parent 'zz' of 'c' is not a host",
    ),
    (
        BASE + "hosts = [{host = \"a\", parent = \"b\"}, {host = \"b\"}]",
        "bootstrap.hosts[0].parent",
        "rank 0 (a) may not have a parent",
    ),
    (
        BASE
        + 'hosts = [{host = "a"}, {host = "b", parent = "c"}, {host = "c", parent = "b"}]',
        "bootstrap.hosts",
        "parent cycle",
    ),
    (
        BASE
        + "hosts = [{host = \"a\"}, {host = \"b\", parent = \"a\"}]\n[tbon]\ntopo = \"kary:2\"",
        "bootstrap.hosts[1].parent",
        "only allowed with tbon.topo = \"custom\"",
    ),
    (
        BASE + "hosts = [{host = \"a\"}, {bind = \"tcp://*:1\"}]",
        "bootstrap.hosts[1].host",
        "is required",
    ),
    (BASE + "hosts = [{host = \"n[1-\"}]", "bootstrap.hosts[0].host", "unmatched '['"),
    (BASE + "hosts = [{host = \"a\", port = 3}]", "bootstrap.hosts[0].port", "unknown key 'port'"),
    (
        BASE + "hosts = [{host = \"a\", bind = \"http://x\"}]",
        "bootstrap.hosts[0].bind",
        "not a ZeroMQ endpoint",
    ),
    (
        BASE
        + "hosts = [{host = \"n[0-1]\", connect = \"tcp://x:1\"}, {host = \"n1\", connect = \"tcp://y:1\"}]",
        "bootstrap.hosts[1].connect",
        "conflicting",
    ),
    (BASE + "hosts = \"a,b\"", "bootstrap.hosts", "must be an array"),
    (BASE + "hosts = [\"a\"]", "bootstrap.hosts[0]", "must be a table"),
    (
        '[bootstrap]\ndefault_port = 1\ndefault_bind = "tcp://*:%p"\ndefault_connect = "tcp://%h:%p"\n'
        'hosts = [{host = "a"}, {host = "b"}]',
        "bootstrap.curve_cert",
        "is required when",
    ),
    (
        '[bootstrap]\ncurve_cert = "/c"\ndefault_bind = "tcp://*:%p"\ndefault_connect = "tcp://%h:1"\n'
        'hosts = [{host = "a"}, {host = "b"}]',
        "bootstrap.default_bind",
        "default_port is not set",
    ),
    (
        '[bootstrap]\ncurve_cert = "/c"\nhosts = [{host = "a"}, {host = "b"}]',
        "bootstrap.hosts[0].bind",
        "no bind URI",
    ),
    ("[bootstrap]\ndefault_port = 70000", "bootstrap.default_port", "must be <= 65535"),
    ("[bootstrap]\ndefault_port = \"8050\"", "bootstrap.default_port", "must be an integer"),
    ("[bootstrap]\ndefault_port = true", "bootstrap.default_port", "not a boolean"),
    ("[bootstrap]\ncurve_cert = \"\"", "bootstrap.curve_cert", "must not be empty"),
    ("[bootstrap]\ncurve-cert = \"/c\"", "bootstrap.curve-cert", "unknown key 'curve-cert'"),
    ("[tbon]\ntopo = \"star\"", "tbon.topo", "unknown scheme 'star'"),
    ("[tbon]\ntopo = \"kary:x\"", "tbon.topo", "integer >= 0"),
    ("[tbon]\ntorpid_max = \"30 seconds\"", "tbon.torpid_max", "invalid duration '30 seconds'"),
    ("[tbon]\ntcp_user_timeout = -1", "tbon.tcp_user_timeout", "non-negative"),
    ("[tbon]\nzmqdebug = 2", "tbon.zmqdebug", "must be <= 1"),
    ("[tbon]\nfanout = 2", "tbon.fanout", "unknown key 'fanout'"),
    ("[tbon]\nprefertcp = 1", "tbon.prefertcp", "must be a boolean"),
    ("tbon = 3", "tbon", "must be a table"),
    ("[resource]\nexclude = \"n[1-\"", "resource.exclude", "idset of ranks or a hostlist"),
    (
        BASE + "hosts = [{host = \"a\"}, {host = \"b\"}]\n[resource]\nexclude = \"5\"",
        "resource.exclude",
        "out of range",
    ),
    (
        BASE + "hosts = [{host = \"a\"}, {host = \"b\"}]\n[resource]\nexclude = \"c\"",
        "resource.exclude",
        "'c' is not a host in bootstrap.hosts",
    ),
    ("[resource]\nnoverify = \"yes\"", "resource.noverify", "must be a boolean"),
    ("[access]\nallow_guest_user = true", "access.allow_guest_user", "unknown key"),
    ("[bootstap]\nx = 1", "bootstap", "unknown table 'bootstap'"),
]


@pytest.mark.parametrize(("text", "key", "fragment"), ERRORS)
def test_errors_name_file_key_and_problem(tmp_path, text, key, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        config.load(path)
    err = exc.value
    assert err.file == str(path)
    assert err.key == key
    assert fragment in err.problem
    assert str(err).startswith(f"{path}: {key}: ")


def test_toml_syntax_error_has_line_number(tmp_path):
    path = write(tmp_path, '[bootstrap]\ncurve_cert = "/c"\ndefault_port = = 3\n')
    with pytest.raises(ConfigError) as exc:
        config.load(path)
    assert (
        str(path) in str(exc.value)
        and "TOML syntax error" in str(exc.value)
        and "line 3" in str(exc.value)
    )


def test_missing_and_non_utf8_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        config.load(tmp_path / "nope.toml")
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b"[tbon]\ntopo = \"\xff\"\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        config.load(bad)
    empty = tmp_path / "empty.d"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no \\*.toml files"):
        config.load(empty)


def test_rank_of_unknown_host_and_bad_rank(tmp_path):
    cfg = config.load(write(tmp_path, BASE + 'hosts = [{host = "a"}, {host = "b"}]'))
    with pytest.raises(ConfigError, match="hostname 'zz' is not listed"):
        cfg.rank_of("zz")
    with pytest.raises(ConfigError, match="rank 2 is out of range"):
        cfg.bind_uri(2)


def test_duplicate_host_entries_merge_like_flux(tmp_path):
    cfg = config.load(write(tmp_path, BASE + 'hosts = [{host = "n[0-3]"}, {host = "n2", bind = "tcp://eth1:%p"}]'))
    assert cfg.size == 4
    assert cfg.bind_uri(2) == "tcp://eth1:8050" and cfg.bind_uri(1) == "tcp://*:8050"
    # a repeated host keeps the rank of its first entry (flux-config-bootstrap(5))
    assert cfg.rank_of("n2") == 2 and cfg.hostnames == ["n0", "n1", "n2", "n3"]
    assert cfg.has_host("n3") and not cfg.has_host("n4") and not cfg.has_host("n")


def test_hosts_are_resolved_once_and_not_part_of_equality():
    text = "[bootstrap]\ncurve_cert = \"/c\"\ndefault_port = 1\ndefault_bind = \"tcp://%h:%p\"\n" \
           "default_connect = \"tcp://%h:%p\"\n[[bootstrap.hosts]]\nhost = \"n[0-299]\"\n"
    cfg = config.loads(text)
    hosts = cfg.hosts
    assert cfg.hosts is hosts and len(hosts) == 300
    # one list of names, shared by every broker forked with this config (issue 32)
    assert cfg.hostnames is cfg.hostnames and cfg.hostnames[299] == "n299"
    assert cfg.rank_of("n299") == 299 and cfg.connect_uri(7) == "tcp://n7:1"
    fresh = config.loads(text)
    assert cfg == fresh and cfg.to_dict() == fresh.to_dict()  # the cached hosts are not a field
    assert config.loads(config.dumps(cfg)).hosts == hosts
