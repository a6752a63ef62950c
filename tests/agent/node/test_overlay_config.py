"""broker.toml rendering from the rank map, and which brokers a membership change touches."""

from __future__ import annotations

import pytest
from fluxnode.agent.node.overlay_config import OverlaySettings, placement, render
from fluxnode.agent.node.ranks import RankMap
from fluxnode.broker_conf import config

SETTINGS = OverlaySettings(
    port=8050, bind_address="0.0.0.0", topo="kary:2", cert_path="/etc/fluxnode/curve.cert"
)


def nodes(kube, names: list[str]) -> dict[str, dict]:
    for i, name in enumerate(names):
        kube.add_node(name, address=f"10.0.0.{i + 1}",
                      annotations={"fluxnode.io/broker-port": "9000"} if name == "odd" else None)
    return {n["metadata"]["name"]: n for n in kube.list("nodes")}


def test_rendered_config_uses_internal_ips_and_port_annotations(kube):
    ns = nodes(kube, ["a", "b", "odd"])
    cfg = config.loads(render(RankMap(("a", "b", "odd")), ns, SETTINGS))
    assert cfg.hostnames == ["a", "b", "odd"]
    assert [cfg.connect_uri(r) for r in range(3)] == ["tcp://10.0.0.1:8050", "tcp://10.0.0.2:8050", "tcp://10.0.0.3:9000"]
    assert cfg.bind_uri(2) == "tcp://0.0.0.0:9000" and cfg.bind_uri(0) == "tcp://0.0.0.0:8050"
    assert cfg.bootstrap.curve_cert == "/etc/fluxnode/curve.cert" and cfg.tbon.topo == "kary:2"


@pytest.mark.parametrize("topo", ["kary:2", "kary:3", "binomial"])
def test_a_join_touches_only_the_new_rank_its_parent_and_the_leader(kube, topo):
    names = [f"n{i}" for i in range(8)]
    ns = nodes(kube, names)
    s = OverlaySettings(port=8050, bind_address="0.0.0.0", topo=topo, cert_path="/c")
    before, after = RankMap(tuple(names[:7])), RankMap(tuple(names))
    touched = {n for n in names[:7] if placement(before, ns, s, n) != placement(after, ns, s, n)}
    parent = placement(after, ns, s, "n7").parent[0]
    assert touched == {"n0", names[parent]}
    assert placement(before, ns, s, "n7") is None


def test_a_vacancy_changes_nobody_but_the_renderer(kube):
    names = ["a", "b", "c", "d"]
    ns = nodes(kube, names)
    full, holed = RankMap(tuple(names)), RankMap(tuple(names), frozenset({1}))
    assert all(
        placement(full, ns, SETTINGS, n) == placement(holed, ns, SETTINGS, n)
        for n in ("a", "c", "d")
    )
    assert placement(holed, ns, SETTINGS, "b") is None
