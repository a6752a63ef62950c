"""Small graphs and jobspec builders for the scheduler library tests (no corpus needed)."""

from __future__ import annotations

TINY_GRUG = """<?xml version="1.0" encoding="UTF-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="root" for="node" attr.name="root" attr.type="int"><default>0</default></key>
  <key id="type" for="node" attr.name="type" attr.type="string"/>
  <key id="basename" for="node" attr.name="basename" attr.type="string"/>
  <key id="unit" for="node" attr.name="unit" attr.type="string"/>
  <key id="size" for="node" attr.name="size" attr.type="long"><default>1</default></key>
  <key id="subsystem" for="node" attr.name="subsystem" attr.type="string"><default>containment</default></key>
  <key id="e_subsystem" for="edge" attr.name="e_subsystem" attr.type="string"><default>containment</default></key>
  <key id="relation" for="edge" attr.name="relation" attr.type="string"><default>contains</default></key>
  <key id="rrelation" for="edge" attr.name="rrelation" attr.type="string"><default>in</default></key>
  <key id="id_scope" for="edge" attr.name="id_scope" attr.type="int"><default>0</default></key>
  <key id="id_start" for="edge" attr.name="id_start" attr.type="int"><default>0</default></key>
  <key id="id_stride" for="edge" attr.name="id_stride" attr.type="int"><default>1</default></key>
  <key id="gen_method" for="edge" attr.name="gen_method" attr.type="string"><default>MULTIPLY</default></key>
  <key id="multi_scale" for="edge" attr.name="multi_scale" attr.type="int"><default>1</default></key>
  <graph id="tiny" edgedefault="directed">
    <node id="cluster"><data key="root">1</data><data key="type">cluster</data><data key="basename">tiny</data></node>
    <node id="rack"><data key="type">rack</data><data key="basename">rack</data></node>
    <node id="node"><data key="type">node</data><data key="basename">node</data></node>
    <node id="socket"><data key="type">socket</data><data key="basename">socket</data></node>
    <node id="core"><data key="type">core</data><data key="basename">core</data></node>
    <node id="memory"><data key="type">memory</data><data key="basename">memory</data><data key="size">2</data><data key="unit">GB</data></node>
    <node id="gpu"><data key="type">gpu</data><data key="basename">gpu</data></node>
    <edge id="e1" source="cluster" target="rack"/>
    <edge id="e2" source="rack" target="node"><data key="id_scope">1</data><data key="multi_scale">2</data></edge>
    <edge id="e3" source="node" target="socket"><data key="multi_scale">2</data></edge>
    <edge id="e4" source="socket" target="core"><data key="id_scope">1</data><data key="multi_scale">4</data></edge>
    <edge id="e5" source="socket" target="gpu"><data key="id_scope">1</data></edge>
    <edge id="e6" source="socket" target="memory"><data key="id_scope">1</data><data key="multi_scale">2</data></edge>
  </graph>
</graphml>
"""

# The GraphML keys every GRUG file declares (type, basename, size, the MULTIPLY edge keys...).
GRUG_KEYS = TINY_GRUG[TINY_GRUG.index("  <key"):TINY_GRUG.index("  <graph")]


def grug_document(graph: str) -> str:
    """A GRUG file of `graph` (a ``<graph ...>...</graph>`` element) with the usual keys."""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
            f"{GRUG_KEYS}{graph}</graphml>\n")


def grug_vertices(*kinds: tuple[str, str, str]) -> str:
    """GraphML ``<node>`` elements of a recipe, one per (id, type, basename); the first is
    the root."""
    lines = []
    for i, (vid, type_, base) in enumerate(kinds):
        root = '<data key="root">1</data>' if i == 0 else ""
        lines.append(f'    <node id="{vid}">{root}<data key="type">{type_}</data>'
                     f'<data key="basename">{base}</data></node>\n')
    return "".join(lines)


def grug_recipe(base: str, *edges: tuple) -> str:
    """A GRUG file whose vertex types are named by ``edges`` (parent type, child type,
    count[, id_scope]); the first edge's parent is the root, with basename ``base``, and
    every other vertex's basename is its type."""
    kinds = [edges[0][0]] + [e[1] for e in edges]
    vertices = grug_vertices(*((k, k, base if i == 0 else k) for i, k in enumerate(kinds)))
    lines = []
    for n, (parent, kid, count, *scope) in enumerate(edges, start=1):
        sc = f'<data key="id_scope">{scope[0]}</data>' if scope else ""
        lines.append(f'    <edge id="e{n}" source="{parent}" target="{kid}">{sc}'
                     f'<data key="multi_scale">{count}</data></edge>\n')
    return grug_document(f'  <graph id="{base}" edgedefault="directed">\n{vertices}'
                         + "".join(lines) + "  </graph>\n")


def jobspec(resources: list, duration: int = 3600, constraints: dict | None = None) -> dict:
    system: dict = {"duration": duration}
    if constraints is not None:
        system["constraints"] = constraints
    return {"version": 9999, "resources": resources, "attributes": {"system": system},
            "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}]}


def cores(n: int, nodes: int | None = None, slots: int = 1) -> dict:
    """slot[slots]->core[n], optionally under node[nodes]."""
    slot = {"type": "slot", "count": slots, "label": "default",
            "with": [{"type": "core", "count": n}]}
    if nodes is None:
        return jobspec([slot])
    return jobspec([{"type": "node", "count": nodes, "with": [slot]}])


R_TWO_NODES = {
    "version": 1,
    "execution": {
        "R_lite": [{"rank": "0-1", "children": {"core": "0-3", "gpu": "0"}}],
        "nodelist": ["n[0-1]"],
        "starttime": 0,
        "expiration": 0,
    },
}
