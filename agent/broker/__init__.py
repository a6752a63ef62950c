"""The broker runtime: one broker per node, joined into a tree-based overlay (TBON).

As flux-core's src/broker, one concept per module: `broker` wires the parts and runs
the reactor; `boot` reads broker.toml into the instance state; `overlay` and
`overlay_auth` are the ZeroMQ/CURVE tree; `routing`, `services`, `events` move
messages; `quorum`, `shutdown`, `config_reload` are the state machine's steps;
`modules` loads broker modules (the scheduler service is one, loaded by name, never
imported); `resource_service` gathers R; `discovery` reads this node's hardware;
`connector` serves local clients and `client` is how everyone talks to a broker;
`launcher` starts a test instance, `proxy` and `ssh_tunnel` reach a remote broker.
"""
