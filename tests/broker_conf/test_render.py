"""broker.toml rendering from the Jinja template: output always loads with config.load."""

from __future__ import annotations

import pytest
from fluxnode.broker_conf import config, render
from fluxnode.broker_conf.render import RenderError

KIND = ["kind-control-plane", "kind-worker", "kind-worker2", "kind-worker3", "kind-worker4"]


def test_kind_cluster(tmp_path):
    text = render.render_broker_toml(KIND, curve_cert="/etc/fluxnode/curve.cert", port=8050)
    assert '{ host = "kind-control-plane,kind-worker,kind-worker[2-4]" }' in text
    path = tmp_path / "broker.toml"
    path.write_text(text)
    cfg = config.load(path)
    assert cfg.hostnames == KIND
    assert cfg.tbon.topo == "kary:2"
    assert cfg.bootstrap.curve_cert == "/etc/fluxnode/curve.cert"
    assert cfg.bind_uri(0) == "tcp://0.0.0.0:8050"
    assert cfg.connect_uri(4) == "tcp://kind-worker4:8050"
    assert cfg.topology().parents == (None, 0, 0, 1, 1)


def test_test_size_instance_with_per_host_ports():
    hosts = [f"test{i}" for i in range(4)]
    overrides = {
        h: {"bind": f"tcp://127.0.0.1:{5000 + i}", "connect": f"tcp://127.0.0.1:{5000 + i}"}
        for i, h in enumerate(hosts)
    }
    text = render.render_broker_toml(
        hosts, curve_cert="/tmp/x/curve.cert", port=5000, topo="binomial", host_overrides=overrides,
        tbon={"torpid_max": 0, "tcp_user_timeout": "2s"}, resource={"override": "/tmp/x/res.json"},
        access={"allow-guest-user": True},
    )
    cfg = config.loads(text)
    assert [cfg.connect_uri(r) for r in range(4)] == [
        f"tcp://127.0.0.1:{5000 + r}" for r in range(4)
    ]
    assert (
        cfg.tbon.topo == "binomial"
        and cfg.tbon.torpid_max == 0.0
        and cfg.tbon.tcp_user_timeout == 2.0
    )
    assert cfg.resource.override == "/tmp/x/res.json" and cfg.access.allow_guest_user


def test_overrides_split_runs_and_keep_order():
    text = render.render_broker_toml(
        ["n1", "n2", "n3", "n4", "n5"], curve_cert="/c", port=1, topo="custom",
        host_overrides={"n3": {"parent": "n2"}},
    )
    cfg = config.loads(text)
    assert [e.host for e in cfg.bootstrap.hosts] == ["n[1-2]", "n3", "n[4-5]"]
    assert cfg.hostnames == ["n1", "n2", "n3", "n4", "n5"]
    assert cfg.topology().parent(2) == 1


def test_single_broker_without_cert():
    cfg = config.loads(render.render_broker_toml(["solo"], curve_cert=None, port=8050))
    assert cfg.size == 1 and cfg.bootstrap.curve_cert is None


def test_quoting_is_toml_safe():
    text = render.render_broker_toml(
        ["a", "b"], curve_cert='/path/with "quote"\\and\\backslash', port=1
    )
    assert config.loads(text).bootstrap.curve_cert == '/path/with "quote"\\and\\backslash'


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"hosts": []}, "at least one hostname"),
        ({"hosts": ["a", "a"]}, "'a' is listed more than once"),
        ({"hosts": ["a b"]}, "invalid hostname"),
        ({"host_overrides": {"zz": {"bind": "tcp://*:1"}}}, "'zz' is not in hosts"),
        ({"host_overrides": {"a": {"port": 1}}}, "unknown key 'port'"),
        ({"topo": "star"}, "tbon.topo"),
        ({"port": 0}, "bootstrap.default_port"),
        ({"curve_cert": None}, "bootstrap.curve_cert"),
        ({"bind": "http://x"}, "bootstrap.default_bind"),
        ({"tbon": {"torpid_max": -1}}, "tbon.torpid_max"),
        ({"tbon": {"bogus": 1}}, "tbon.bogus"),
    ],
)
def test_bad_arguments(kwargs, fragment):
    args = {"hosts": ["a", "b"], "curve_cert": "/c", "port": 8050, **kwargs}
    hosts = args.pop("hosts")
    with pytest.raises(RenderError) as exc:
        render.render_broker_toml(hosts, **args)
    assert fragment in str(exc.value)
