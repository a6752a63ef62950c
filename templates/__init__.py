"""Jinja templates for broker.toml and the node connect script (package data)."""
