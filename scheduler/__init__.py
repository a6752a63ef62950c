"""Graph scheduling in the manner of Fluxion: the graph library (graph, readers, jobspec,
planner, traversers, policies, writers, resource_query), the leader's scheduler service
(`service`) and the Kubernetes binder (`binder`)."""
