"""Planners: how much of a resource is free over time (Fluxion's planner and planner_multi)."""
