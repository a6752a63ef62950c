"""``fluxnode resource-query``: Fluxion's resource-query, command for command.

``command`` is the entry point (options, graph loading, the read-eval loop);
``session`` is the command language (``match``, ``cancel``, ``find``...) and what
each command writes; ``picks`` reads an earlier match's output (R or JGF) back
into the vertices an ``update`` replays.
"""
