"""Readers that build a resource graph: GRUG (GraphML recipes), JGF, RFC 20 R, hwloc XML."""
