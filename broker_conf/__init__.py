"""Broker configuration model: hostlists, idsets, topology, broker.toml, CURVE certificates, R."""
