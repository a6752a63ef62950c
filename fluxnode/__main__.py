"""`python -m fluxnode` runs the CLI (tests and the test-size launcher use it).

`python -m fluxnode broker ...`, which the node agent runs on every node, starts the
broker without importing click when its arguments are plain (commands/broker_argv.py),
and first defers the standard-library modules a broker imports but never runs
(agent/broker/deferred.py: `inspect`, which `dataclasses` imports).
"""

import sys


def main() -> None:
    if sys.argv[1:2] == ["broker"]:
        from fluxnode.agent.broker.deferred import defer_unused_stdlib

        defer_unused_stdlib()
        from fluxnode.commands.broker_argv import run

        code = run(sys.argv[2:])
        if code is not None:
            sys.exit(code)
    from fluxnode.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
