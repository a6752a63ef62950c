"""Shared helpers for the scheduler benchmarks: synthetic GRUG graphs and jobspecs."""

from __future__ import annotations

from pathlib import Path

# Every key Fluxion's GRUG reader reads, with its default: Fluxion's resource-query
# cannot build a traverser on a recipe that leaves one out (no containment subsystem)
KEYS = """  <key id="root" for="node" attr.name="root" attr.type="int"><default>0</default></key>
  <key id="type" for="node" attr.name="type" attr.type="string"/>
  <key id="basename" for="node" attr.name="basename" attr.type="string"/>
  <key id="size" for="node" attr.name="size" attr.type="long"><default>1</default></key>
  <key id="unit" for="node" attr.name="unit" attr.type="string"/>
  <key id="subsystem" for="node" attr.name="subsystem" attr.type="string"><default>containment</default></key>
  <key id="e_subsystem" for="edge" attr.name="e_subsystem" attr.type="string"><default>containment</default></key>
  <key id="relation" for="edge" attr.name="relation" attr.type="string"><default>contains</default></key>
  <key id="rrelation" for="edge" attr.name="rrelation" attr.type="string"><default>in</default></key>
  <key id="id_scope" for="edge" attr.name="id_scope" attr.type="int"><default>0</default></key>
  <key id="id_start" for="edge" attr.name="id_start" attr.type="int"><default>0</default></key>
  <key id="id_stride" for="edge" attr.name="id_stride" attr.type="int"><default>1</default></key>
  <key id="gen_method" for="edge" attr.name="gen_method" attr.type="string"><default>MULTIPLY</default></key>
  <key id="multi_scale" for="edge" attr.name="multi_scale" attr.type="int"><default>1</default></key>
  <key id="as_tgt_subsystem" for="edge" attr.name="as_tgt_subsystem" attr.type="string"><default>containment</default></key>
  <key id="as_tgt_uplvl" for="edge" attr.name="as_tgt_uplvl" attr.type="int"><default>1</default></key>
  <key id="as_src_uplvl" for="edge" attr.name="as_src_uplvl" attr.type="int"><default>1</default></key>
"""


def grug(nodes: int, sockets: int = 2, cores: int = 32, gpus_per_socket: int = 2) -> str:
    """cluster0 -> node[nodes] -> socket[sockets] -> core[cores] + gpu[gpus_per_socket]."""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
{KEYS}  <graph id="bench" edgedefault="directed">
    <node id="cluster"><data key="root">1</data><data key="type">cluster</data><data key="basename">cluster</data></node>
    <node id="node"><data key="type">node</data><data key="basename">node</data></node>
    <node id="socket"><data key="type">socket</data><data key="basename">socket</data></node>
    <node id="core"><data key="type">core</data><data key="basename">core</data></node>
    <node id="gpu"><data key="type">gpu</data><data key="basename">gpu</data></node>
    <edge id="c2n" source="cluster" target="node"><data key="multi_scale">{nodes}</data></edge>
    <edge id="n2s" source="node" target="socket"><data key="multi_scale">{sockets}</data></edge>
    <edge id="s2c" source="socket" target="core"><data key="id_scope">1</data><data key="multi_scale">{cores}</data></edge>
    <edge id="s2g" source="socket" target="gpu"><data key="id_scope">1</data><data key="multi_scale">{gpus_per_socket}</data></edge>
  </graph>
</graphml>
"""


def write_grug(path: Path, nodes: int) -> Path:
    path.write_text(grug(nodes))
    return path


def jobspec(resources: list, duration: int = 3600) -> dict:
    return {"version": 1, "resources": resources, "attributes": {"system": {"duration": duration}},
            "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}


def single_core() -> dict:
    return jobspec([{"type": "slot", "count": 1, "label": "task",
                     "with": [{"type": "core", "count": 1}]}])


def whole_node() -> dict:
    """One node, exclusively, all of its cores in one slot (the whole-node stream)."""
    return jobspec([{"type": "node", "count": 1, "exclusive": True, "with": [
        {"type": "slot", "count": 1, "label": "task",
         "with": [{"type": "socket", "count": 2, "with": [{"type": "core", "count": 32}]}]}]}])


def gang_nodes(n: int) -> dict:
    return jobspec([{"type": "node", "count": n, "with": [
        {"type": "slot", "count": 1, "label": "task",
         "with": [{"type": "socket", "count": 1, "with": [{"type": "core", "count": 1}]}]}]}])


def gang_cores(n: int, per: int) -> dict:
    return jobspec([{"type": "slot", "count": n, "label": "task",
                     "with": [{"type": "core", "count": per}]}])
